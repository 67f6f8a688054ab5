"""FDCR (Analyst, Critic, Engineer, Moderator) and the strategies: evidence in, a modification spec out."""
