"""What the ground truth says beyond the quirks drawn: a failed trial's cause (`causes`, a rule over the
recorded effects; `replay`, by replaying the trial with a quirk switched off), the entries the harness
repaired in code (`repairs`), and the validity of an evolution's accepted edits (`validity`).
"""
