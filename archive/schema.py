"""The archive's tables in PostgreSQL, created and migrated by the archiver itself (docs/archive.md says what each
holds). ``hb_schema`` keeps the version applied; each migration runs once, in one transaction, under an advisory
lock, so two archivers starting together never apply one twice.

The score arithmetic of the flush scripts (:mod:`hotboard.lua`) lives here as SQL: ``hb_hold`` holds a total at
+-(2^53 - 1) and ``hb_replay`` is the ``earliest`` boards' step loop (:func:`hotboard.earliest.replay`), so the
archive computes every total exactly as Redis does, from the same window arguments.
"""

from __future__ import annotations

from typing import Any

from hotboard.keys import MAX_EXACT

#: Any number: it only keeps two migrating archivers apart.
MIGRATION_LOCK = 0x68_62_61_72  # "hbar"

_V1 = f"""
CREATE TABLE hb_archive (id text NOT NULL);
INSERT INTO hb_archive VALUES (md5(random()::text || clock_timestamp()::text));
CREATE TABLE hb_boards (
    board text PRIMARY KEY,
    spec text NOT NULL,
    expires_at_ms bigint NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 0,
    as_of_ms bigint NOT NULL DEFAULT 0
);
CREATE TABLE hb_scores (
    board text NOT NULL,
    player text NOT NULL,
    score bigint NOT NULL,
    tie_ms bigint,
    meta bytea,
    PRIMARY KEY (board, player)
);
CREATE TABLE hb_watermarks (
    board text NOT NULL,
    field text NOT NULL,
    last_offset bigint NOT NULL,
    PRIMARY KEY (board, field)
);
CREATE TABLE hb_checkpoints (
    topic text NOT NULL,
    partition integer NOT NULL,
    checkpoint bigint,
    halt text,
    epoch integer NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, partition)
);
CREATE FUNCTION hb_hold(x bigint) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT least(greatest(x, -{MAX_EXACT}), {MAX_EXACT})';
CREATE FUNCTION hb_replay(
    v bigint, t bigint, ops text[], amounts bigint[], ts bigint[], descending boolean,
    OUT score bigint, OUT tie bigint
) LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    i integer;
    a bigint;
    nv bigint;
BEGIN
    score := v;
    tie := t;
    FOR i IN 1 .. coalesce(array_length(ops, 1), 0) LOOP
        a := amounts[i];
        IF ops[i] = 'incr' THEN
            nv := hb_hold(coalesce(score, 0) + a);
        ELSIF ops[i] = 'decr' THEN
            nv := greatest(coalesce(score, 0) - a, 0);
        ELSIF ops[i] = 'best' AND score IS NOT NULL THEN
            nv := CASE WHEN (descending AND a > score) OR (NOT descending AND a < score) THEN a ELSE score END;
        ELSE
            nv := a;
        END IF;
        IF score IS NULL OR nv <> score OR ops[i] = 'put' THEN
            tie := ts[i];
        END IF;
        score := nv;
    END LOOP;
END
$$;
"""

#: Each audit of every board (``hotboard audit`` without ``--board``): what the archiver's audit gauges read.
_V2 = """
CREATE TABLE hb_audits (
    id bigserial PRIMARY KEY,
    finished_at_ms bigint NOT NULL,
    boards integer NOT NULL,
    players bigint NOT NULL,
    not_exact integer NOT NULL,
    differences integer NOT NULL
);
"""

#: Since when an audit of every board is due (ms since the epoch): when the archive was made, or moved to this
#: version. Until the first audit the staleness alert counts from it, not from an archiver's start, which every
#: deploy moves.
_V3 = """
CREATE TABLE hb_audit_due (since_ms bigint NOT NULL);
INSERT INTO hb_audit_due VALUES ((extract(epoch FROM clock_timestamp()) * 1000)::bigint);
"""

#: Migration n (1-based) brings the schema from version n - 1 to n. Append; never edit one that shipped.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
VERSION = len(MIGRATIONS)

#: One window's rows, copied in (COPY) and applied by one INSERT; dropped at commit.
STAGE = """
CREATE TEMP TABLE IF NOT EXISTS hb_stage (
    board text NOT NULL,
    player text NOT NULL,
    d1 bigint,
    d2 bigint,
    lo bigint,
    hi bigint,
    absent bigint,
    ops text[],
    amounts bigint[],
    ts bigint[],
    descending boolean NOT NULL,
    meta bytea
) ON COMMIT DELETE ROWS
"""
STAGE_COLUMNS = ("board", "player", "d1", "d2", "lo", "hi", "absent", "ops", "amounts", "ts", "descending", "meta")


async def migrate(conn: Any) -> int:
    """Bring the schema to :data:`VERSION`; returns the version found before."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute("CREATE TABLE IF NOT EXISTS hb_schema (version integer NOT NULL)")
        found = await conn.fetchval("SELECT max(version) FROM hb_schema")
        before = int(found or 0)
        if before > VERSION:
            raise RuntimeError(f"the archive's schema is version {before}, newer than this archiver's {VERSION}")
        for version in range(before + 1, VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO hb_schema VALUES ($1)", version)
    return before
