"""τ² loaded for everything above: tau2 imported quietly (`tau2lib`, with litellm deferred:
`deferred_litellm`), the task data, splits and environments (`suite`), and the checks of tool-call
arguments every environment carries (`tool_calls`). No pytest, no harness code."""
