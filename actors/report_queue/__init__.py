"""The report queue's wire format: the original .NET system's JSON job, and its codec.

Application code on top of the broker library: `ReportQueueMessage` (message.py) is
the job as written in `report:queue`; `ReportCodec` (codec.py) implements the library's
`Codec` protocol with it, RecordId as the job key of the index `report:queue:jobs`.
"""

from __future__ import annotations

from actors.report_queue.message import JOB_KEY_PATTERN, InvalidReportMessage, ReportQueueMessage

# ReportCodec (codec.py, on the broker library) is imported from its module: the message
# alone stays importable without Dramatiq.
__all__ = ["JOB_KEY_PATTERN", "InvalidReportMessage", "ReportQueueMessage"]
