"""The Optuna search: the study file (:mod:`.studyfile`), storages (:mod:`.storage`), signals and faults
(:mod:`.runguard`), samplers (:mod:`.samplers`), the stored study and its trials (:mod:`.study`), the one runner
with its budget (:mod:`.runner`), local worker processes (:mod:`.workers`) and the strategies
(:mod:`.strategies`: joint, hybrid)."""
