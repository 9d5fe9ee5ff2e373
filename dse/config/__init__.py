"""Inputs and their validation: numbers (:mod:`.values`), TOML tables (:mod:`.schema`), the workload
(:mod:`.workload`), the ``[parallel]`` table (:mod:`.parallel`), the configuration type every evaluation takes
(:mod:`.configuration`) and the search space's knobs (:mod:`.space`). Imports nothing above it in ``dse``."""
