"""Fair play in coin rooms: the chip-dumping detector (docs/INTEGRITY.md).

* :mod:`.features` -- what one settled match says about each person in it (pure);
* :mod:`engine.tools.quality` (the bots' layer, handed in) -- the regret of a decision from the player's own view;
* :mod:`.score` -- the suspicion score of a pair and its evidence (pure);
* :mod:`.store` -- the projection, its Redis keys and TTLs, the feed runner.
"""
