"""The one model client: deadlines, retries, reply parsing, context overflow, the response cache, role calls."""
