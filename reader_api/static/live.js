// The live page: renders the ranks the API streams (so every order and tie policy shows as the API ranks it),
// marks what moved since the previous event, and shows as_of. Text goes in with textContent only.
"use strict";

const params = new URLSearchParams(location.search);
const board = params.get("board");
const player = params.get("player");
const limit = params.get("limit") || "10";
const radius = params.get("radius") || "3";
const $ = (id) => document.getElementById(id);

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
}

// Renders one answer's entries into a table; `before` is player -> rank of the previous answer.
function render(table, entries, before) {
  const body = document.createElement("tbody");
  const now = new Map();
  for (const e of entries) {
    now.set(e.player, e.rank);
    const row = body.insertRow();
    row.dataset.player = e.player;
    row.dataset.rank = String(e.rank);
    const was = before.get(e.player);
    let change = "";
    if (before.size && was === undefined) { row.classList.add("new", "changed"); change = "new"; }
    else if (was !== undefined && e.rank < was) { row.classList.add("up", "changed"); change = "▲" + (was - e.rank); }
    else if (was !== undefined && e.rank > was) { row.classList.add("down", "changed"); change = "▼" + (e.rank - was); }
    if (e.player === player) row.classList.add("me");
    cell(row, String(e.rank), "rank");
    cell(row, e.player, "player");
    cell(row, e.score.toLocaleString("en"), "score");
    cell(row, change, "change");
  }
  table.replaceChild(body, table.tBodies[0]);
  return now;
}

function showMeta(answer, id) {
  const asOf = $("as-of");
  if (answer.as_of == null) {
    asOf.textContent = "never flushed";
    asOf.removeAttribute("datetime");
  } else {
    const when = new Date(answer.as_of);
    asOf.textContent = when.toISOString().replace("T", " ").replace("Z", " UTC");
    asOf.dateTime = when.toISOString();
  }
  asOf.dataset.asOf = String(answer.as_of);
  $("version").textContent = id || "–";
  $("total").textContent = String(answer.total);
}

// EventSource reconnects by itself after a dropped stream, but not after an error answer (a player not on
// the board yet, Redis away): then a new one is opened a little later.
function watch(url, table, section, onAnswer, ranks = new Map()) {
  section.hidden = false;
  const source = new EventSource(url);
  source.onopen = () => { $("state").textContent = "live"; $("state").dataset.state = "live"; };
  source.onmessage = (message) => {
    const answer = JSON.parse(message.data);
    ranks = render(table, answer.entries, ranks);
    $("error").hidden = true;
    if (onAnswer) onAnswer(answer, message.lastEventId);
  };
  source.addEventListener("error", (message) => {
    if (message.data) {  // the API's error event: the board or player is gone for now
      $("error").textContent = JSON.parse(message.data).message;
      $("error").hidden = false;
    } else {
      $("state").textContent = "reconnecting";
      $("state").dataset.state = "reconnecting";
      if (source.readyState === EventSource.CLOSED) {
        setTimeout(() => watch(url, table, section, onAnswer, ranks), 2000);
      }
    }
  });
}

async function pick() {
  $("pick").hidden = false;
  $("state").textContent = "pick a board";
  try {
    const listing = await (await fetch("/v1/boards?limit=50")).json();
    for (const b of listing.boards || []) {
      const a = document.createElement("a");
      a.href = "/?board=" + encodeURIComponent(b.board);
      a.textContent = b.board + " (" + b.order + ", " + b.ties + ")";
      $("boards").appendChild(document.createElement("li")).appendChild(a);
    }
  } catch (e) { /* the form works without the list */ }
}

async function main() {
  if (!board) return pick();
  document.title = "hotboard · " + board;
  $("board-name").textContent = board;
  $("limit").textContent = limit;
  const base = "/v1/boards/" + encodeURIComponent(board);
  const first = await fetch(base + "/top?limit=" + encodeURIComponent(limit));
  if (!first.ok) {  // say why (unknown board, bad limit) instead of reconnecting forever
    $("error").textContent = (await first.json()).message;
    $("error").hidden = false;
    $("state").textContent = "not streaming";
    return;
  }
  fetch(base).then((r) => r.json()).then((d) => {
    if (d.order) $("definition").textContent = (d.order === "desc" ? "highest first" : "lowest first") + ", ties " + d.ties;
  }).catch(() => {});
  watch(base + "/top/stream?limit=" + encodeURIComponent(limit), $("top"), $("top-section"), showMeta);
  if (player) {
    $("player-name").textContent = player;
    const url = base + "/players/" + encodeURIComponent(player) + "/around/stream?radius=" + encodeURIComponent(radius);
    watch(url, $("around"), $("around-section"));
  }
}

main();
