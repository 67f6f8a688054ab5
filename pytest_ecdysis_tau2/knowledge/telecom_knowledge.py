"""What the simulated model knows of τ² telecom tasks: the dual-control plan (`TelecomKnowledge`).

Telecom's gold actions (`evaluation_criteria.actions`) are the task's intent in both hands: the agent's
account actions (`refuel_data`, `enable_roaming`, `send_payment_request`, `resume_line`,
`transfer_to_human_agents`) and the user's device actions (requestor `user`: `toggle_airplane_mode`,
`set_network_mode_preference`, `grant_app_permission`, ...). The plan keeps their order; a user step is
marked `actor="user"` (the simulated agent asks for it in words, the simulated user runs the tool, never
the agent). τ²'s telecom gold lists no lookups, so the plan adds the ones a real agent makes before an
account write, from the request only: the customer by the phone number the user states
(`get_customer_by_phone`), the line it writes (`get_details_by_id`), and the bills before a payment request
(`get_bills_for_customer`). Their results are where the written ids (`C1001`, `L1002`, `B1234321`) are read,
so a harness that cuts them bends the write as in airline and retail.

No telecom-specific quirk is added: `shared/data/tau2-failure-modes.md` publishes no failure mix for
telecom, so the profiles' quirks apply as they are (`sim_knowledge.ID_BENDS["telecom"]` for the id habit).
"""

from __future__ import annotations

import re
from typing import Any

from pytest_ecdysis.sim.knowledge import Scenario

from .sim_knowledge import Tau2Knowledge

#: a US-style phone number as τ²'s telecom scenarios state it ("555-123-2002").
PHONE = re.compile(r"\b\d{3}-\d{3}-\d{4}\b")


class TelecomKnowledge(Tau2Knowledge):
    """`SimKnowledge` for τ² telecom: gold actions of both hands, with the agent's lookups before writes."""

    def _with_lookups(
        self, gold: list[tuple[str, dict]], writes: set[str], scenario: Scenario, env: Any
    ) -> list[tuple[str, dict, bool]]:
        tools = self._tool_names
        phone = PHONE.search(scenario.known_info)
        calls: list[tuple[str, dict, bool]] = []
        read: set[tuple[str, str]] = set()

        def lookup(name: str, args: dict[str, Any]) -> None:
            key = (name, repr(sorted(args.items())))
            if name in tools and key not in read:
                calls.append((name, args, False))
                read.add(key)

        for name, args in gold:
            if name in writes:
                if phone and "customer_id" in args:
                    lookup("get_customer_by_phone", {"phone_number": phone.group(0)})
                if isinstance(args.get("line_id"), str):
                    lookup("get_details_by_id", {"id": args["line_id"]})
                if "bill_id" in args and isinstance(args.get("customer_id"), str):
                    lookup("get_bills_for_customer", {"customer_id": args["customer_id"]})
            calls.append((name, args, True))
        return calls
