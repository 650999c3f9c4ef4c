"""The Redis layout: every key name hotboard reads or writes is built here and nowhere else.

Board ``B`` lives in the sorted set ``hb:{B}``. The braces are a Redis Cluster hash tag, so the board, its
flush watermarks and its meta hash always share one slot and can be updated in one atomic step.
"""

from __future__ import annotations

import re
import zlib

PREFIX = "hb"

#: Every board flushed or declared, as a sorted set of names (all scores 0): ``GET /v1/boards`` pages it by
#: name with ZRANGEBYLEX, never one reply with every board.
BOARD_INDEX_KEY = f"{PREFIX}:board-index"

#: Fields of ``hb:{B}:meta``.
META_VERSION = "version"
META_AS_OF = "as_of"
#: Field of ``hb:{B}:applied`` kept by a deleted board: the delete's version (one past the board's: a delete is
#: a step of the board), which a board written again goes on from (no watermark field is without a colon).
APPLIED_DELETED_VERSION = "deleted_version"
#: Set on a seasonal board's own meta hash once a worker writes one of its periods: it is then written.
META_PERIODS = "periods"

BOARD_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
PLAYER_MAX_CHARS = 128
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

DEFAULT_BOARD = "global"

#: Largest magnitude a total (and a delta sent in one write) may have: a Redis score is an IEEE double, exact
#: for integers only up to 2^53. Totals saturate here instead of silently losing precision.
MAX_EXACT = 2**53 - 1


def board_key(board: str) -> str:
    """Sorted set holding the board's exact integer totals."""
    return f"{PREFIX}:{{{board}}}"


def applied_key(board: str) -> str:
    """Hash ``<topic>:<partition>`` -> last Kafka offset of that partition applied to the board."""
    return f"{PREFIX}:{{{board}}}:applied"


def meta_key(board: str) -> str:
    """Hash with ``version`` (bumped once per applied window) and ``as_of`` (ms time of that flush)."""
    return f"{PREFIX}:{{{board}}}:meta"


def def_key(board: str) -> str:
    """Hash: the board's definition (``order``, ``operator``, ``ties``, ``spec``, ``created``); absent = default."""
    return f"{PREFIX}:{{{board}}}:def"


def flush_keys(board: str) -> tuple[str, str, str, str]:
    """The board's KEYS in the flush scripts, in their order: sorted set, applied hash, meta hash, definition hash
    (one call where four cost a group flush ~0.1 s per 100,000 boards)."""
    base = f"{PREFIX}:{{{board}}}"
    return base, base + ":applied", base + ":meta", base + ":def"


def player_meta_key(board: str) -> str:
    """Hash player -> display metadata (a JSON object of at most 512 bytes), last write wins."""
    return f"{PREFIX}:{{{board}}}:pmeta"


def members_key(board: str) -> str:
    """``earliest`` boards only: hash player -> its member in the sorted set (tie time + player id)."""
    return f"{PREFIX}:{{{board}}}:members"


def dense_key(board: str) -> str:
    """``dense`` boards only: sorted set of the distinct stored scores (member = the score as an integer)."""
    return f"{PREFIX}:{{{board}}}:dense"


def counts_key(board: str) -> str:
    """``dense`` boards only: hash score -> how many players hold it."""
    return f"{PREFIX}:{{{board}}}:counts"


def checkpoint_key(topic: str) -> str:
    """Hash ``<partition>`` -> offset up to which every event of that partition of ``topic`` is applied to its
    board (and dead-lettered when invalid). A partition resumes right after it. Its own hash tag: one slot per
    topic, whatever the boards' slots."""
    return f"{PREFIX}:ckpt:{{{topic}}}"


def watermark_field(topic: str, partition: int, epoch: int = 0) -> str:
    """The field of ``hb:{B}:applied`` holding the partition's watermark on board B, in the partition's log
    epoch (0: ``<topic>:<partition>``; a later one after a re-created topic's halt was lifted, see
    :mod:`flusher.checkpoints`)."""
    return f"{topic}:{partition}" if epoch == 0 else f"{topic}:{partition}:{epoch}"


#: Groups of boards on one node (docs/group-bookkeeping.md): fixed forever, since a durable layout cannot regroup.
GROUPS_ONE_NODE = 128
#: Fields of a group hash besides its watermark fields (which always hold a colon): the version and ``as_of`` of
#: every board of the group that has no meta hash (named as the meta hash's fields: a reader reads the one or the
#: other), the epoch every other writer under a board of the group steps, the layout stamp.
GROUP_VERSION = META_VERSION
GROUP_AS_OF = META_AS_OF
GROUP_EPOCH = "epoch"
GROUP_LAYOUT = "layout"
#: Appended to a group board's stored ``spec`` at its first group write: no older worker's spec equals it, so
#: the shipped FLUSH refuses the board (``{-2, spec}``) instead of applying a window the group already holds.
GROUP_SPEC_MARK = "#g2"


def group_key(tag: str) -> str:
    """Hash of one group of boards: its watermark per partition (fields as :func:`watermark_field`), and
    :data:`GROUP_VERSION`, :data:`GROUP_EPOCH`, :data:`GROUP_LAYOUT`. ``tag`` is the group's number on one node,
    a hash tag in the boards' slot on a cluster."""
    return f"{PREFIX}:grp:{{{tag}}}"


def group_of(board: str, groups: int = GROUPS_ONE_NODE) -> int:
    """A board's group on one node: a hash of its name, the same in every process and release."""
    return zlib.crc32(board.encode()) % groups


def layout_stamp(groups: int = GROUPS_ONE_NODE) -> str:
    """The group hash's :data:`GROUP_LAYOUT` on one node: the mode and the number of groups it was written under."""
    return f"node:{groups}"


def halt_field(partition: int) -> str:
    """Field of ``hb:ckpt:{T}``: ``<reason> <checkpoint>`` while the partition is halted (the checkpoint Redis
    held when the halt was recorded)."""
    return f"{partition}:halt"


def epoch_field(partition: int) -> str:
    """Field of ``hb:ckpt:{T}``: the partition's log epoch (absent: 0), moved when a halt for a re-created log
    is lifted."""
    return f"{partition}:epoch"


def gen_field(partition: int) -> str:
    """Field of ``hb:ckpt:{T}``: the partition's restore generation (absent: 0). Every restore or rebuild lowering
    that names the partition moves it (to the server's clock in microseconds, or one past the last: never a value
    it had before a FLUSHALL), even where the checkpoint it lowers to is the one Redis holds already; the
    checkpoint script compares it as it compares the checkpoint, so a move decided before a swap is refused."""
    return f"{partition}:gen"


def restoring_field(partition: int) -> str:
    """Field of ``hb:ckpt:{T}``, Redis Cluster only: while a board is swapped in, the deadline (ms, Redis TIME)
    until which the checkpoint script refuses every move of the partition (set by the lowering before the swap,
    cleared by the one after it; a mark past its deadline is a crashed restore's and is ignored). Old workers read
    this bare number alone, so it stays one."""
    return f"{partition}:restoring"


def restoring_by_field(partition: int) -> str:
    """Field of ``hb:ckpt:{T}``, Redis Cluster only, beside :func:`restoring_field`: ``<run> <deadline>``, the
    staging run holding the mark (``archive.staging.run_token``). Another run's marking lowering refuses while it is
    live, and only its own run's clearing lowering deletes it (two restores at once never clear each other's; a
    bare deadline without it, or not equal to its deadline, is an older version's run, honoured too)."""
    return f"{partition}:restoring_by"


def is_valid_board(board: str) -> bool:
    return BOARD_RE.fullmatch(board) is not None


def is_valid_player(player: str) -> bool:
    """1-128 characters and no control characters (C0, DEL, C1)."""
    if not 0 < len(player) <= PLAYER_MAX_CHARS:
        return False
    # isprintable() is a fast C loop and implies "no control characters"; only the rare non-printable but
    # legal ids (e.g. containing U+2028) take the regex.
    return player.isprintable() or _CONTROL_RE.search(player) is None


def idempotency_key(scope: str, key_digest: str) -> str:
    """String: the read API's answer to a write sent with an ``Idempotency-Key`` (the writer's scope and the
    key's digest), kept with a TTL. Its own hash tag per writer."""
    return f"{PREFIX}:idem:{{{scope}}}:{key_digest}"
