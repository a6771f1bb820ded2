"""The courier's remote API, simulated: it is down for the first attempt of every other
order, the way real APIs time out now and then."""


class RemoteUnavailable(Exception):
    pass


def book(order_id: int, attempt: int) -> str:
    if order_id % 2 == 0 and attempt < 2:
        raise RemoteUnavailable(f"courier API unavailable (order {order_id}, attempt {attempt})")
    return f"PICKUP-{order_id:06d}"
