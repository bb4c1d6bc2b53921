"""The ground floor of ``deer``: what every other part stands on and which imports nothing of theirs --
errors, work counters, atomic files, optional extras, model specs, unit vectors."""
