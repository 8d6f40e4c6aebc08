"""When an HTTP/1.1 request has arrived whole: its head, and its body up to the cap.

The web worker (web/gunicorn_worker.py) reads each request in its poller, without a thread,
and hands it to a thread only once `RequestReader.feed` says it is there: a client that sends
its head and part of a body, then waits, holds a file descriptor and a few kilobytes, never a
thread. "Whole" means what the application will read without waiting:

* the head, up to its blank line (at most `MAX_HEAD_BYTES`: a longer one is `HEAD_TOO_LARGE`);
* a body of known length (Content-Length) up to that length, or nothing of it when the length
  is over `max_body` (the application refuses it with 413 unread);
* a chunked body up to its last chunk and trailers, or as soon as more than `max_body` bytes of
  it are there (enough for the application to see it is over the cap);
* anything this reader cannot frame (two lengths, a length that is no number, another transfer
  coding, a bad chunk size): at once, so gunicorn's parser answers it (400, 501) as always.

Nothing is checked here that gunicorn's parser does not check again: this only decides when.
"""

from __future__ import annotations

import enum
import re

#: Longest head read before a thread takes the request (gunicorn's own limits are checked
#: after: a request line of 4094 bytes, 100 fields of 8190).
MAX_HEAD_BYTES = 64 * 1024
#: Longest chunk-size line and trailer section waited for (gunicorn refuses longer ones).
MAX_CHUNK_LINE_BYTES = 8190
MAX_TRAILER_BYTES = 64 * 1024

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_HEX = re.compile(rb"[0-9A-Fa-f]+")


class Progress(enum.Enum):
    MORE = "more"  # wait for more bytes
    WHOLE = "whole"  # hand it to a thread
    HEAD_TOO_LARGE = "head too large"  # answer 431 and close


class RequestReader:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.data = bytearray()
        self.progress = Progress.MORE
        #: Where the body starts, once the head is there.
        self.body_start: int | None = None
        self.content_length: int | None = None
        self.chunked = False
        #: The client waits for "100 Continue" before sending its body.
        self.expects_continue = False
        # The chunked body's scan: where the next chunk-size line starts, and the bytes so far.
        self._chunk_pos = 0
        self._decoded = 0
        self._in_trailers = False
        #: Where the search for the head's end resumes: bytes before it were searched.
        self._head_searched = 0

    def feed(self, chunk: bytes) -> Progress:
        self.data += chunk
        if self.progress is Progress.MORE:
            self.progress = self._scan()
        return self.progress

    @property
    def waits_for_body(self) -> bool:
        """The head is here, the body is not, and the client waits to be told to send it."""
        return self.expects_continue and self.progress is Progress.MORE and self.body_start is not None

    def _scan(self) -> Progress:
        if self.body_start is None:
            found = _HEAD_END.search(self.data, self._head_searched)
            if found is None:
                # Only the last three bytes can start an end that the next bytes complete.
                self._head_searched = max(0, len(self.data) - 3)
                return Progress.HEAD_TOO_LARGE if len(self.data) > MAX_HEAD_BYTES else Progress.MORE
            if found.start() > MAX_HEAD_BYTES:
                return Progress.HEAD_TOO_LARGE
            self.body_start = found.end()
            if not self._read_head(bytes(self.data[: found.start()])):
                return Progress.WHOLE  # framing gunicorn refuses: let it answer now
            self._chunk_pos = self.body_start
        if self.chunked:
            return self._scan_chunks()
        length = self.content_length or 0
        if length > self.max_body or len(self.data) - self.body_start >= length:
            return Progress.WHOLE
        return Progress.MORE

    def _read_head(self, head: bytes) -> bool:
        """Take the framing from the head's fields; False when it is not one this reader follows."""
        lengths: list[bytes] = []
        codings: list[bytes] = []
        for line in head.split(b"\n")[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                continue
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                lengths.append(value)
            elif name == b"transfer-encoding":
                codings.extend(part.strip().lower() for part in value.split(b","))
            elif name == b"expect" and value.lower() == b"100-continue":
                self.expects_continue = True
        if codings:
            self.chunked = True
            return not lengths and codings[-1] == b"chunked"
        if len(lengths) > 1:
            return False
        if lengths:
            if not lengths[0].isdigit() or len(lengths[0]) > 18:
                return False
            self.content_length = int(lengths[0])
        return True

    def _scan_chunks(self) -> Progress:
        data = self.data
        while True:
            pos = self._chunk_pos
            if self._in_trailers:
                if data.startswith(b"\r\n", pos) or data.find(b"\r\n\r\n", self._head_searched) >= 0:
                    return Progress.WHOLE
                self._head_searched = max(pos, len(data) - 3)  # resumes here, as for the head
                return Progress.WHOLE if len(data) - pos > MAX_TRAILER_BYTES else Progress.MORE
            end = data.find(b"\r\n", pos)
            if end < 0:
                return Progress.WHOLE if len(data) - pos > MAX_CHUNK_LINE_BYTES else Progress.MORE
            size_text = bytes(data[pos:end]).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size_text) or len(size_text) > 16:
                return Progress.WHOLE  # gunicorn refuses the chunk size
            size = int(size_text, 16)
            if size == 0:
                self._in_trailers = True
                self._chunk_pos = self._head_searched = end + 2
                continue
            start = end + 2
            if self._decoded + min(size, len(data) - start) > self.max_body:
                return Progress.WHOLE  # over the cap: the application can tell, and refuses it
            if len(data) < start + size + 2:
                return Progress.MORE
            self._decoded += size
            self._chunk_pos = start + size + 2
