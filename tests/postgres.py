"""Where the tests' PostgreSQL comes from: HOTBOARD_TEST_POSTGRES (a server URL), else the machine's server on
127.0.0.1:5432 (trust auth); each test gets a fresh database, dropped afterwards. A test that stops or kills
PostgreSQL runs a server of its own (:class:`PostgresServer`: ``initdb`` + ``pg_ctl`` as the postgres user, on a
free port, in a temp dir)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from cli.process import free_port
from tests.services import unavailable

POSTGRES_ENV = "HOTBOARD_TEST_POSTGRES"
MACHINE_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
BIN = Path("/usr/lib/postgresql/15/bin")


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def admin(url: str, *statements: str) -> None:
    """Run ``statements`` on ``url`` outside any transaction (CREATE/DROP DATABASE), from any thread."""

    async def run() -> None:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


@contextlib.contextmanager
def fresh_database(server_url: str | None = None) -> Iterator[str]:
    """A new database on the server (``server_url``, HOTBOARD_TEST_POSTGRES or the machine's), dropped after."""
    server = server_url or os.environ.get(POSTGRES_ENV) or MACHINE_SERVER
    name = f"hb_test_{uuid.uuid4().hex[:12]}"
    try:
        admin(server, f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError) as exc:
        unavailable(f"PostgreSQL at {server} ({exc!r})")
    try:
        yield with_database(server, name)
    finally:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PostgresServer:
    """A PostgreSQL of the test's own, to stop (``-m immediate`` is a crash) and start again on the same port."""

    def __init__(self, data_dir: Path | None = None) -> None:
        #: Not under pytest's tmp_path, whose root pytest keeps at 0700 (the postgres user could not enter it).
        self.dir = data_dir or Path(tempfile.mkdtemp(prefix="hotboard-pg-"))
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["runuser", "-u", "postgres", "--", *args], capture_output=True, check=check, timeout=60)

    def init(self) -> PostgresServer:
        if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
            unavailable("PostgreSQL 15 binaries (initdb, pg_ctl) and runuser")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # a mkdtemp folder is 0700 root: the postgres user must enter it
        shutil.chown(self.dir, "postgres", "postgres")
        self._pg(str(BIN / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres")
        return self.start()

    def start(self) -> PostgresServer:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        data = str(self.dir / "data")
        self._pg(str(BIN / "pg_ctl"), "-D", data, "-l", str(self.dir / "log"), "-w", "-o", options, "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``immediate``: a crash (no checkpoint; recovery replays the WAL at the next start)."""
        self._pg(str(BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", mode, "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        path = self.dir / "log"
        return path.read_text(errors="replace") if path.exists() else ""
