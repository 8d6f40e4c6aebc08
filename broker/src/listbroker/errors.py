"""The broker library's own errors; an application subclasses them to add its own base classes."""

from __future__ import annotations


class BrokerError(Exception):
    """Base of the errors this library raises or recognises on purpose."""


class InvalidMessage(BrokerError):
    """A payload a codec cannot decode (or a message it cannot encode).

    Raised by a codec; the consumer moves such a payload verbatim to the queue's
    `:invalid` list and goes on, so one bad payload never stops a queue.
    """


class DependencyUnavailable(BrokerError):
    """Raised by an actor that found a dependency down before doing anything: not an attempt.

    `ExactRetries` gives the message back to the head of its queue uncounted and the
    `AvailabilityGate` (gate.py) holds the gated queues until the dependency answers.
    """
