"""One configuration -> its metrics, without Optuna: the metric registry (:mod:`.metrics`), the cached workload
pieces (:mod:`.workloads`), the one-accelerator and vectorized costing (:mod:`.evaluator`), the job over several
accelerators (:mod:`.multi_accelerator`) and one or two knobs varied around a design (:mod:`.sweep`)."""
