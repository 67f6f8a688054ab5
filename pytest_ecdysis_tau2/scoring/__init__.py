"""The reward of a trial, computed in a process that never imports harness code: the scoring itself
(`scorer`), a worker's handle on its scorer (`scorer_client`), the session's warm scorer server
(`warm_scorer`), scoring in forked children over environments built once (`cow_scoring`, `db_hash`).
`python -m pytest_ecdysis_tau2.scoring` is the scorer process (`__main__`). Nothing is imported here."""
