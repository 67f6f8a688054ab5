"""The harness's code in processes of its own, and the boundary to it: the agent the orchestrator talks to
(`agent_process`), the fork server and its JSON-lines wire (`agent_wire`), the child's side (`agent_child`),
the child's environment (`agent_env`) and the request parameters the trusted side owns (`request_guard`)."""
