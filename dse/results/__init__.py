"""Reading a study's results (fronts and hypervolume: :mod:`dse.search.pareto`): export (:mod:`.export`), tables
and one trial in depth (:mod:`.views`), several studies side by side (:mod:`.compare`)."""
