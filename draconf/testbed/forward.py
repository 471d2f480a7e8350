"""Expose the API server of a bed's control-plane namespace on the host's 127.0.0.1.

Run by the bed as ``python -m draconf.testbed.forward --listen PORT --netns NAME --to HOST:PORT``.
The listening socket is made in the host's network namespace; then the process joins the bed's
namespace, so every connection it opens to the API server starts there.  Bytes are copied both
ways unchanged (TLS goes end to end between client and kube-apiserver).

Python 3.11 has no ``os.setns``; libc's ``setns(2)`` is called through ctypes.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket
import sys

CLONE_NEWNET = 0x40000000


def join_netns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def _serve(listener: socket.socket, host: str, port: int) -> None:
    async def handle(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, upstream_writer),
                             _pipe(upstream_reader, client_writer))

    server = await asyncio.start_server(handle, sock=listener, backlog=512)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m draconf.testbed.forward")
    parser.add_argument("--listen", type=int, required=True, help="port on the host's 127.0.0.1")
    parser.add_argument("--netns", required=True, help="path of the namespace to connect from")
    parser.add_argument("--to", required=True, help="HOST:PORT inside that namespace")
    args = parser.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.listen))
    except OSError as err:
        print(f"forward: cannot listen on 127.0.0.1:{args.listen}: {(err.strerror or str(err)).lower()}",
              file=sys.stderr)
        return 1
    listener.listen(512)
    listener.setblocking(False)
    join_netns(args.netns)
    asyncio.run(_serve(listener, host, int(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
