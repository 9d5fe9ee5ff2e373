"""Figures: a study's plots (:mod:`.plots`), the drawing helpers and comparison/sweep figures (:mod:`.charts`)
and the self-contained HTML report (:mod:`.report`)."""
