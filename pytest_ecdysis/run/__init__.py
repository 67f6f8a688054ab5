"""One pytest session's run: configure-time set-up, the trial collector, session end, run files, shard merge."""
