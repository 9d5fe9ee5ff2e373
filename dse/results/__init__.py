"""Reading a study's results: Pareto fronts and hypervolume (:mod:`.pareto`), export (:mod:`.export`), tables
and one trial in depth (:mod:`.views`), several studies side by side (:mod:`.compare`)."""
