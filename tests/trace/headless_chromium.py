"""A small DevTools-protocol client for headless Chromium over
--remote-debugging-pipe (file descriptors 3 and 4, messages ended by NUL),
with the standard library only: load a page, collect what went wrong
(console errors, uncaught exceptions, log errors, requests other than the
page's own file), evaluate script, take screenshots, and tell a blank PNG
from a drawn one."""

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
import zlib

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe"]


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, binary, log_path, width=1280, height=1600):
        self.user_data = tempfile.mkdtemp(prefix="pinshim-chromium-")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # Above 10 so that moving them to 3 and 4 in the child cannot clobber.
        high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
        high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)

        def child():
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [binary] + FLAGS + ["--user-data-dir=" + self.user_data,
                                "--window-size=%d,%d" % (width, height), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, close_fds=False,
            preexec_fn=child)
        for fd in (to_chrome_r, from_chrome_w, high_r, high_w):
            os.close(fd)
        self.w, self.r = to_chrome_w, from_chrome_r
        self.buffer = b""
        self.next_id = 0
        self.events = []
        self.session = None
        self.width, self.height = width, height

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.w)
        os.close(self.r)
        self.log.close()
        shutil.rmtree(self.user_data, ignore_errors=True)

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no answer from Chromium")
            ready, _, _ = select.select([self.r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the pipe (see its log)")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=True, timeout=60):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.w, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError("%s: %s" % (method, answer["error"]))
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method, timeout=60):
        deadline = time.time() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read_message(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def pump(self, seconds):
        """Takes the events that arrive within `seconds`."""
        deadline = time.time() + seconds
        try:
            while True:
                self.events.append(self._read_message(deadline))
        except TimeoutError:
            pass

    def open(self, url):
        targets = self.call("Target.getTargets", session=False)["targetInfos"]
        pages = [t for t in targets if t["type"] == "page"]
        target = pages[0]["targetId"] if pages else \
            self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1,
                   "mobile": False})
        self.events = []
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        self.pump(0.5)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError("script failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")

    def problems(self, page_url):
        """Console errors and warnings, uncaught exceptions, log errors and
        requests for anything but the page itself, one line each."""
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in (
                    "error", "warning", "assert"):
                text = " ".join(str(a.get("value", a.get("description", "")))
                                for a in params.get("args", []))
                found.append("console.%s: %s" % (params["type"], text))
            elif method == "Runtime.exceptionThrown":
                d = params.get("exceptionDetails", {})
                found.append("exception: %s %s" % (d.get("text"),
                                                   d.get("exception", {}).get("description", "")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in (
                    "error", "warning"):
                found.append("log: %s" % params["entry"].get("text"))
            elif method == "Network.requestWillBeSent":
                url = params.get("request", {}).get("url", "")
                if url != page_url and not url.startswith(("data:", "about:")):
                    found.append("request: %s" % url)
        return found

    def screenshot(self, path, y=0, height=None):
        """A PNG of the page from y down (height: the viewport's), saved to
        `path`; returns its bytes."""
        clip = {"x": 0, "y": y, "width": self.width, "height": height or self.height, "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                    "captureBeyondViewport": True})["data"]
        import base64
        png = base64.b64decode(data)
        with open(path, "wb") as f:
            f.write(png)
        return png


def png_pixels(png):
    """(width, height, bytes per pixel, rows of unfiltered pixel bytes) of an
    8-bit RGB or RGBA PNG, as Chromium writes them."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width = 8, b"", None
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6):
                raise ValueError("unexpected PNG format %d/%d" % (depth, color))
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def drawn_share(png):
    """(share of pixels not the background colour, distinct colours seen)."""
    width, height, bpp, rows = png_pixels(png)
    counts = {}
    for row in rows[::2]:
        for x in range(0, width * bpp, bpp * 2):
            key = row[x:x + 3]
            counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    background = max(counts.values())
    return 1 - background / total, len(counts)
