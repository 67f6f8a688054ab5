"""The simulated FDCR roles' answers, a pure function of the prompt's evidence: `answers.answer(role, body)`
(Analyst, Critic, Engineer, Moderator, editor), from the findings `evidence` reads record by record and the
proposals `analysis` makes of them (docs/diagnosis.md). Nothing here reads the server's state or ground truth.
"""
