"""The simulated agent searches when a call needs a value it does not have — a flight
number (τ² airline), a product's item id or an order id (τ² retail) — and the value then depends on the
search result, so a harness that cuts or drops that result makes it `unseen_value`. Real τ² data."""

from __future__ import annotations

import pytest

pytest.importorskip("tau2")

from pytest_ecdysis_tau2.knowledge.providers import providers  # noqa: E402


def _search_before(task, tool: str, arg_key: str, searches: set[str]):
    for i, step in enumerate(task.plan):
        if step.name != tool:
            continue
        for dep in step.dependencies:
            if dep.path.rsplit(".", 1)[-1].split("[")[0] == arg_key and dep.source_step >= 0:
                source = task.plan[dep.source_step]
                if source.name in searches:
                    return source, dep, i
    return None


def test_a_booking_searches_the_flight_it_books():
    """Airline task 14 books HAT100, which the user never names: a search_direct_flight of that flight's
    route and date comes before the booking (not gold: the provider added it), and the flight number of
    the booking depends on its result."""
    task = providers()["tau2-airline"].task("14")
    found = _search_before(
        task, "book_reservation", "flight_number", {"search_direct_flight", "search_onestop_flight"}
    )
    assert found is not None
    search, dep, at = found
    assert not search.gold and dep.source_step < at and dep.value == "HAT100"
    assert set(search.arguments) == {"origin", "destination", "date"}


def test_an_item_exchange_looks_up_the_product_of_the_new_item():
    """Retail task 100 modifies items to new item ids the user does not know: get_product_details of each
    new item's product comes first and the new ids depend on it."""
    task = providers()["tau2-retail"].task("100")
    found = _search_before(task, "modify_pending_order_items", "new_item_ids", {"get_product_details"})
    assert found is not None
    search, dep, _ = found
    assert not search.gold and "product_id" in search.arguments and search.result_chars > dep.offset


def test_every_added_search_holds_the_value_it_was_added_for():
    """A search is added only when its result holds the value (else the value stays the model's own)."""
    for suite, ids in (
        ("tau2-airline", [str(i) for i in range(0, 50)]),
        ("tau2-retail", [str(i) for i in range(95, 115)]),
    ):
        for task_id in ids:
            try:
                task = providers()[suite].task(task_id)
            except KeyError:
                continue
            searched = {
                i
                for i, s in enumerate(task.plan)
                if not s.gold and s.name.startswith(("search_", "get_product"))
            }
            for i in searched:
                assert any(d.source_step == i for s in task.plan for d in s.dependencies), (suite, task_id, i)
