// The durable-sessions inspector: one session's tree, context, prompt, skills, tools, live status and search,
// read through the public HTTP API and the session's WebSocket.
//
// Every piece of stored data (message text, ids, tool input and output, block content, session names) is put on
// the page as text: through textContent, createTextNode and setAttribute on plain attributes, never as markup.
// The page's Content-Security-Policy requires Trusted Types, so an innerHTML assignment would throw.
"use strict";

(() => {
  // -- settings -------------------------------------------------------------------------------------------------

  const PAGE_SIZE = 100;          // messages shown per page of a path (older pages on request)
  const BRANCH_FETCHES = 6;       // get_branches calls in flight at once
  const DESCEND_LIMIT = 2000;     // steps when walking from a message down to a leaf
  const LIVE_LOG_LIMIT = 200;     // broadcasts kept in the live log
  const SESSIONS_PAGE = 50;       // rows per page of the session list
  const TOKEN_KEY = "durable-sessions-token";  // the tab's token, shared with /docs
  const WRITES_KEY = "durable-sessions-writes";
  const PARTS_SHOWN = 50;         // parts of one message rendered at first (then "Show more")
  const TEXT_SHOWN = 20000;       // characters of one text rendered at first (then "Show more")
  // the server's root as a path of this origin ("//inspect" must never make API calls go to "//v1/...": another host)
  const BASE = location.pathname.replace(/inspect\/?$/, "").replace(/^\/+/, "/");

  // -- DOM helpers: data only ever becomes text -------------------------------------------------------------------

  /** An element: h("div", {class: "x", data: {id: value}, on: {click: fn}}, child, "text", [more]). */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") el.className = value;
      else if (key === "data") for (const [name, v] of Object.entries(value)) el.dataset[name] = String(v);
      else if (key === "on") for (const [name, fn] of Object.entries(value)) el.addEventListener(name, fn);
      else if (key === "text") el.textContent = String(value);
      else if (key === "hidden" || key === "open" || key === "disabled" || key === "checked") el[key] = true;
      else if (key === "value") el.value = String(value);
      else el.setAttribute(key, String(value));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(el, child);
      else if (child instanceof Node) el.appendChild(child);
      else el.appendChild(document.createTextNode(String(child)));
    }
    return el;
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  const $ = (id) => document.getElementById(id);

  /** A <details>; `body` may be a function, called the first time the fold is opened (a big body costs nothing shut). */
  function fold(summary, body, {open = false, cls = ""} = {}) {
    if (typeof body !== "function") return h("details", {class: cls, open}, h("summary", null, summary), body);
    const details = h("details", {class: cls}, h("summary", null, summary));
    details.addEventListener("toggle", () => {
      if (details.open && details.childNodes.length === 1) append(details, [body()]);
    });
    details.open = open;
    return details;
  }

  /** An element showing `text` as text, at most TEXT_SHOWN characters at a time, with a "Show more" button. */
  function longText(tag, cls, text) {
    text = String(text ?? "");
    const el = h(tag, {class: cls, text: text.slice(0, TEXT_SHOWN)});
    if (text.length <= TEXT_SHOWN) return el;
    const add = (from, to) => el.appendChild(document.createTextNode(text.slice(from, to)));
    return h("div", {class: "long"}, el, showMore(text.length, TEXT_SHOWN, "characters", add));
  }

  /** A "Show more" button for `total` items of which `step` are shown: each click calls `add(from, to)`
   * for the next `step`; the button goes once all are shown. */
  function showMore(total, step, unit, add) {
    let shown = step;
    const more = h("button", {type: "button", class: "show-more"});
    const label = () => { more.textContent = `Show more (${(total - shown).toLocaleString("en")} more ${unit})`; };
    more.addEventListener("click", () => {
      add(shown, shown + step);
      shown += step;
      if (shown >= total) more.remove();
      else label();
    });
    label();
    return more;
  }

  function pretty(value) {
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (error) {
      return String(value);
    }
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function ago(value) {
    const date = typeof value === "number" ? new Date(value) : new Date(value || 0);
    const seconds = Math.round((Date.now() - date.getTime()) / 1000);
    if (!Number.isFinite(seconds) || !value) return "";
    if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
    return date.toISOString().slice(0, 10);
  }

  function notice(text, kind = "info") {
    const el = $("notice");
    el.textContent = text;
    el.dataset.kind = kind;
  }

  // -- the API ------------------------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, error) {
      super(`${error.type}: ${error.message}`);
      this.status = status;
      this.type = error.type;
    }
  }

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    writes: sessionStorage.getItem(WRITES_KEY) === "1",
    generation: 0,       // bumped on every session load: late answers for an older view are dropped
    session: null,       // the open session's view (see openSession)
    socket: null,
    sessionsCursor: null,
    sessionsAsked: 0,
  };

  async function api(method, path, body) {
    const headers = {Accept: "application/json"};
    const token = state.token;
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = {method, headers, cache: "no-store", credentials: "same-origin"};
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(BASE + path, init);
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = null;
    }
    if (!response.ok) {
      const error = data && data.error ? data.error : {type: `HTTP ${response.status}`, message: text.slice(0, 200)};
      if (response.status === 401) askForToken(token);
      throw new ApiError(response.status, error);
    }
    return data;
  }

  const seg = (value) => encodeURIComponent(value);
  const sessionPath = (id, rest) => `v1/sessions/${seg(id)}/${rest}`;
  const rpc = async (id, method, params) => (await api("POST", sessionPath(id, "rpc"), {method, params})).result;

  /** Run fn over items with at most `limit` calls in flight; the results in order. */
  async function mapLimit(items, limit, fn) {
    const results = new Array(items.length);
    let next = 0;
    async function worker() {
      while (next < items.length) {
        const index = next++;
        results[index] = await fn(items[index], index);
      }
    }
    await Promise.all(Array.from({length: Math.min(limit, items.length)}, worker));
    return results;
  }

  /** A call sent with `sent` (a token or null) was refused 401: forget that token and ask for one. */
  function askForToken(sent) {
    if (state.token !== sent) return;  // a newer token is on its way
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("token-form").hidden = false;
    $("token-input").focus();
    notice(sent ? "The server refused that token." : "This server needs its bearer token.", "error");
  }

  /** The WebSocket subprotocol carrying the token: "bearer." + base64url(UTF-8 token), no padding. */
  function bearerProtocol(token) {
    const bytes = new TextEncoder().encode(token);
    let binary = "";
    for (const byte of bytes) binary += String.fromCharCode(byte);
    return `bearer.${btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
  }

  // -- the address: #s=<session>&leaf=<message>&tab=<tab>&focus=<message> -------------------------------------------

  /** A token handed over in the fragment (never sent to the server): keep it, hide it. Before any call. */
  function takeToken() {
    const params = new URLSearchParams(location.hash.slice(1));
    if (!params.has("token")) return;
    state.token = params.get("token");
    sessionStorage.setItem(TOKEN_KEY, state.token);
    params.delete("token");
    history.replaceState(null, "", `${location.pathname}${location.search}#${params}`);
  }

  function readHash() {
    takeToken();
    const params = new URLSearchParams(location.hash.slice(1));
    return {
      session: params.get("s"),
      leaf: params.get("leaf"),
      tab: params.get("tab") || "messages",
      focus: params.get("focus"),
      stored: params.get("view") === "stored",
    };
  }

  function go(changes) {
    const params = new URLSearchParams(location.hash.slice(1));
    for (const [key, value] of Object.entries(changes)) {
      if (value === null || value === undefined || value === "") params.delete(key);
      else params.set(key, value);
    }
    location.hash = params.toString();
  }

  // -- the session list ----------------------------------------------------------------------------------------------

  async function loadSessions(more = false) {
    const list = $("session-list");
    const prefix = $("prefix").value;
    const query = new URLSearchParams({limit: String(SESSIONS_PAGE)});
    if (prefix) query.set("prefix", prefix);
    if (more && state.sessionsCursor) query.set("cursor", state.sessionsCursor);
    const asked = ++state.sessionsAsked;  // answers to an older prefix are dropped
    let page;
    try {
      page = await api("GET", `v1/sessions?${query}`);
    } catch (error) {
      if (asked !== state.sessionsAsked) return;
      clear(list);
      $("sessions-more").hidden = true;
      $("sessions-note").textContent = [404, 405, 501].includes(error.status)
        ? `This server does not list sessions (${error.message}); open one by id below.`
        : `Cannot list sessions: ${error.message}`;
      return;
    }
    if (asked !== state.sessionsAsked) return;
    if (!more) clear(list);
    const rows = page.sessions || [];
    for (const row of rows) list.appendChild(sessionRow(row));
    state.sessionsCursor = page.cursor;
    $("sessions-more").hidden = !state.sessionsCursor;
    const shown = list.children.length;
    $("sessions-note").textContent = shown ? `${shown} session${shown === 1 ? "" : "s"}${state.sessionsCursor ? "+" : ""}`
      : (prefix ? "No session id starts with that." : "No sessions yet.");
    markCurrentSession();
  }

  /** One row of GET /v1/sessions: {id, messages (every branch), compactions, updatedAt, state, problem, active}. */
  function sessionRow(row) {
    const id = row.id;
    const link = h("a", {href: `#${new URLSearchParams({s: id})}`, class: "session-link", data: {session: id}},
      h("span", {class: "session-id", text: id}),
      h("span", {class: "session-facts"},
        h("span", {class: "count", title: "stored messages, every branch",
          text: `${row.messages} message${row.messages === 1 ? "" : "s"}`}),
        row.compactions ? h("span", {class: "count", text: `${row.compactions} compacted`}) : null,
        h("span", {class: "updated", title: `updated ${row.updatedAt}`, text: ago(row.updatedAt)}),
        row.active ? h("span", {class: "awake", title: "awake now (not hibernated)", text: "awake"}) : null),
      row.state === "quarantined" ? h("span", {class: "error", title: row.problem || "", text: "quarantined"}) : null);
    return h("li", {data: {session: id}}, link);
  }

  function markCurrentSession() {
    const current = state.session && state.session.id;
    for (const li of $("session-list").children) li.classList.toggle("current", li.dataset.session === current);
  }

  // -- one session ------------------------------------------------------------------------------------------------------

  const TABS = [["messages", "Messages"], ["context", "Context & prompt"], ["tools", "Tools"], ["live", "Live"],
    ["search", "Search"]];

  async function openSession(route) {
    const generation = ++state.generation;
    const id = route.session;
    const same = state.session && state.session.id === id;
    const view = same ? state.session : {id, live: [], status: null, newIds: new Set()};
    view.route = route;
    state.session = view;
    markCurrentSession();
    if (!same) closeLive();
    renderFrame(view);
    try {
      await loadOverview(view, generation);
      if (state.session === view && !state.socket) connectLive(view);  // once a call went through (the token)
      if (generation !== state.generation) return;
      renderHeader(view);
      await renderTab(view, generation);
    } catch (error) {
      if (generation !== state.generation) return;
      showError($("tab-body"), error);
      if (!state.socket) setPill(view, "not live", "closed");
    }
  }

  /** Whether the session exists, asked before anything else: the page's other reads (the RPC ones, the
   *  frozen prompt) would wake an actor for a mistyped id and leave an empty session behind. A server that
   *  cannot tell (no such route, or 501 from a server of another release) is taken at its word on each read. */
  async function checkExists(view) {
    if (view.exists) return;
    try {
      view.summary = (await api("GET", `v1/sessions/${seg(view.id)}`)).session;
    } catch (error) {
      if (error.type === "SessionNotFoundError") {
        throw new ApiError(404, {type: error.type, message: `There is no session "${view.id}" on this server.`});
      }
      if (error.type !== "RouteNotFoundError" && error.type !== "NotSupportedError") throw error;
    }
    view.exists = true;
  }

  async function loadOverview(view, generation) {
    const id = view.id;
    await checkExists(view);
    const [metadata, latest, count, compactions, estimate] = await Promise.all([
      rpc(id, "get_metadata", []).catch(() => ({})),
      api("GET", sessionPath(id, "messages:leaf")).then((r) => r.message),
      api("GET", sessionPath(id, "messages:count")).then((r) => r.count),
      api("GET", sessionPath(id, "compactions")).then((r) => r.compactions),
      rpc(id, "estimate_tokens", []).catch(() => null),
    ]);
    if (generation !== state.generation) return;
    Object.assign(view, {metadata: metadata || {}, latest, count, compactions, estimate});
  }

  function renderFrame(view) {
    const main = clear($("session"));
    const tabs = h("nav", {id: "tabs", role: "tablist"}, TABS.map(([key, label]) => h("a", {
      href: `#${new URLSearchParams({s: view.id, tab: key})}`, role: "tab", class: "tab", data: {tab: key},
      "aria-selected": String(view.route.tab === key),
    }, label)));
    main.appendChild(h("section", {id: "session-header"},
      h("div", {class: "title-row"},
        h("h1", {id: "session-id", text: view.id}),
        h("span", {id: "session-name", class: "muted"}),
        h("span", {id: "live-pill", class: "pill", data: {state: view.liveState || "connecting"},
          text: view.liveText || "live: connecting"})),
      h("div", {id: "session-facts", class: "facts"}),
      h("div", {id: "token-meter"})));
    main.appendChild(tabs);
    main.appendChild(h("section", {id: "tab-body", data: {tab: view.route.tab}}, h("p", {class: "muted", text: "Loading…"})));
    renderStatus(view);
  }

  function renderHeader(view) {
    const name = view.metadata && typeof view.metadata.name === "string" ? view.metadata.name : "";
    $("session-name").textContent = name;
    $("session-name").title = name;
    const facts = clear($("session-facts"));
    append(facts, [
      fact("messages on the active path", view.count, "path-length"),
      fact("latest leaf", view.latest ? view.latest.id : "none", "latest-leaf"),
      fact("compactions", view.compactions.length, "compaction-count"),
      view.metadata && view.metadata.source ? fact("source", view.metadata.source) : null,
      state.writes ? h("button", {type: "button", id: "compact-now", on: {click: () => compactNow(view)}},
        "Compact now") : null,
    ]);
    renderStatus(view);
  }

  function fact(label, value, id) {
    return h("span", {class: "fact", id: id ? `fact-${id}` : null},
      h("span", {class: "fact-label", text: label}), h("span", {class: "fact-value", text: value, title: value}));
  }

  /** The token meter: the newest broadcast's estimate against its threshold (else the estimate alone). */
  function renderStatus(view) {
    const meter = $("token-meter");
    if (!meter) return;
    clear(meter);
    const status = view.status;
    const estimate = status ? status.tokenEstimate : view.estimate;
    const threshold = status ? status.tokenThreshold : null;
    if (estimate === undefined || estimate === null) return;
    const label = threshold ? `${estimate.toLocaleString("en")} / ${threshold.toLocaleString("en")} tokens`
      + ` before auto-compaction` : `${estimate.toLocaleString("en")} tokens (estimate; no threshold reported yet)`;
    append(meter, [h("span", {class: "meter-label", text: label}), threshold ? bar(estimate, threshold, "token-bar") : null]);
    if (status) {
      meter.appendChild(h("span", {id: "phase", class: "pill", data: {phase: status.phase}, text: status.phase}));
    }
  }

  function bar(value, max, id) {
    const pct = max ? Math.min(100, Math.round((value / max) * 100)) : 0;
    const outer = h("span", {class: `bar${max && value > max ? " over" : ""}`, id, title: max ? `${pct}%` : ""});
    const inner = h("span", {class: "fill"});
    inner.style.width = `${pct}%`;
    outer.appendChild(inner);
    return outer;
  }

  async function renderTab(view, generation) {
    for (const tab of document.querySelectorAll("#tabs .tab")) {
      tab.setAttribute("aria-selected", String(tab.dataset.tab === view.route.tab));
    }
    const body = $("tab-body");
    body.dataset.tab = view.route.tab;
    const render = {messages: renderMessages, context: renderContext, tools: renderTools, live: renderLive,
      search: renderSearch}[view.route.tab] || renderMessages;
    await render(view, body, generation);
    if (generation === state.generation) body.dataset.shown = view.route.tab;  // done (tests wait for it)
  }

  function showError(el, error) {
    clear(el).appendChild(h("p", {class: "error", text: error.message || String(error)}));
  }

  // -- messages: the path to a leaf, its branches and compaction overlays --------------------------------------------------
  //
  // A path is read newest page first (GET messages?leaf=&limit=&before=&overlays=): "the model's view" has compaction
  // overlays applied, "stored" shows every stored message with the compacted ranges marked. A server that does not
  // page answers the whole path; the page is then cut here.

  async function loadPage(view, leaf, before, stored, limit = PAGE_SIZE) {
    const query = new URLSearchParams({limit: String(limit)});
    if (leaf) query.set("leaf", leaf);
    if (before) query.set("before", before);
    if (stored) query.set("overlays", "false");
    const messages = (await api("GET", sessionPath(view.id, `messages?${query}`))).messages;
    if (stored && messages.some(isOverlay)) view.storedUnavailable = true;
    if (messages.length <= limit) return {messages, root: messages.length < limit};
    const end = before ? messages.findIndex((m) => m.id === before) : messages.length;  // a server without pages
    const start = Math.max(0, (end < 0 ? messages.length : end) - limit);
    return {messages: messages.slice(start, end < 0 ? messages.length : end), root: start === 0};
  }

  /** The ids of the active path (the latest leaf's), stored messages; read only when a branch is shown. */
  async function activeIds(view) {
    if (view.activeIds) return view.activeIds;
    const ids = new Set();
    let before = null;
    for (;;) {
      const page = await loadPage(view, null, before, true, 1000);
      for (const m of page.messages) ids.add(m.id);
      if (page.root || !page.messages.length) break;
      before = page.messages[0].id;
    }
    view.activeIds = ids;
    return ids;
  }

  function pathKey(route) {
    return JSON.stringify([route.leaf, route.stored]);
  }

  async function renderMessages(view, body, generation) {
    const route = view.route;
    if (view.pathKey !== pathKey(route) || !view.entries) {
      view.pathKey = pathKey(route);
      const first = await loadPage(view, route.leaf, null, route.stored);
      view.entries = first.messages;
      view.reachedRoot = first.root;
    }
    while (route.focus && !view.reachedRoot && !view.entries.some((m) => m.id === route.focus)) {
      const older = await loadPage(view, route.leaf, view.entries[0].id, route.stored);
      view.entries = [...older.messages, ...view.entries];
      view.reachedRoot = older.root;
    }
    const entries = view.entries;
    const leafId = entries.length ? entries[entries.length - 1].id : null;
    const onActive = !route.leaf || (view.latest && route.leaf === view.latest.id);
    const active = onActive ? null : await activeIds(view);
    if (generation !== state.generation) return;
    clear(body);
    append(body, [messagesToolbar(view, route, onActive, leafId),
      h("ol", {id: "messages", data: {count: String(entries.length), view: route.stored ? "stored" : "model"}})]);
    await fillMessages(view, $("messages"), generation, active);
    if (generation !== state.generation) return;
    if (route.focus) flash(route.focus);
  }

  function messagesToolbar(view, route, onActive, leafId) {
    const viewSwitch = h("span", {class: "view-switch"},
      h("a", {href: "#", id: "view-model", class: route.stored ? "" : "selected",
        on: {click: (event) => { event.preventDefault(); go({view: null}); }}}, "as the model sees it"),
      h("a", {href: "#", id: "view-stored", class: route.stored ? "selected" : "",
        on: {click: (event) => { event.preventDefault(); go({view: "stored"}); }}}, "as stored"));
    return h("div", {class: "toolbar"},
      h("span", {id: "path-note", data: {active: String(onActive)}},
        onActive ? "The active path (to the latest leaf)" : "A branch off the active path, to leaf ",
        onActive ? null : h("code", {text: leafId || ""})),
      onActive ? null : h("button", {type: "button", id: "to-active", on: {click: () => go({leaf: null, focus: null})}},
        "Back to the active path"),
      viewSwitch,
      route.stored && view.storedUnavailable ? h("span", {class: "error",
        text: "This server cannot read the stored path without overlays."}) : null,
      h("form", {class: "inline", on: {submit: (event) => {
        event.preventDefault();
        const target = event.target.elements.goto.value.trim();
        if (target) goToMessage(view, target);
      }}}, h("input", {name: "goto", type: "text", placeholder: "Go to message id", spellcheck: "false"})));
  }

  async function fillMessages(view, list, generation, active) {
    const entries = view.entries;
    const route = view.route;
    if (!view.reachedRoot) {
      list.appendChild(h("li", {class: "older"}, h("button", {type: "button", id: "older", on: {click: async () => {
        const older = await loadPage(view, route.leaf, entries[0].id, route.stored);
        view.entries = [...older.messages, ...view.entries];
        view.reachedRoot = older.root;
        await renderMessages(view, $("tab-body"), state.generation);
      }}}, `Show ${PAGE_SIZE} earlier messages`)));
    }
    if (!entries.length) list.appendChild(h("li", {class: "muted", text: "No messages on this path."}));
    const cuts = route.stored ? compactedRanges(view, entries) : new Map();
    const cards = [];
    entries.forEach((message, i) => {
      const cut = cuts.get(i);
      if (cut && cut.starts) list.appendChild(cutMarker(cut.compaction, "start"));
      const card = messageCard(view, message, active, cut);
      cards.push([card, i]);
      list.appendChild(card);
      if (cut && cut.ends) list.appendChild(cutMarker(cut.compaction, "end"));
    });
    const parents = cards.map(([, i]) => parentOf(view, entries, i));
    const siblings = await mapLimit(parents, BRANCH_FETCHES, (parent) => parent === null ? null
      : api("GET", sessionPath(view.id, `messages/${seg(parent)}/branches`)).then((r) => r.messages, () => null));
    if (generation !== state.generation) return;
    cards.forEach(([card, i], k) => {
      if (siblings[k] && siblings[k].length > 1) addBranchSwitch(view, card, entries[i], siblings[k], active);
    });
    list.dataset.branchPoints = String(list.querySelectorAll(".branches").length);
  }

  /** The stored parent of entry i of a loaded path (an overlay stands for its range; the first loaded entry's
   *  parent is not loaded, and its branches are looked up only when it is the root). */
  function parentOf(view, entries, i) {
    if (i === 0) return null;
    const previous = entries[i - 1];
    const overlay = overlayOf(view, previous);
    if (overlay) return overlay.toMessageId;
    return isOverlay(previous) ? null : previous.id;
  }

  const isOverlay = (message) => typeof message.id === "string" && message.id.startsWith("compaction_");

  function overlayOf(view, message) {
    if (!isOverlay(message)) return null;
    const id = message.id.slice("compaction_".length);
    return view.compactions.find((c) => c.id === id) || null;
  }

  /** For the stored view: entry index -> {compaction, starts, ends} of the compacted ranges on the loaded entries.
   *  Of the compactions starting at one message, the newest applies (docs/behaviours.md §8); a range whose start
   *  is older than the loaded entries covers everything up to its end. */
  function compactedRanges(view, entries) {
    const position = new Map(entries.map((m, i) => [m.id, i]));
    const byStart = new Map();
    for (const c of view.compactions) byStart.set(c.fromMessageId, c);
    const found = new Map();
    for (const c of byStart.values()) {
      const end = position.get(c.toMessageId);
      if (end === undefined) continue;
      const start = position.has(c.fromMessageId) ? position.get(c.fromMessageId) : (view.reachedRoot ? -1 : 0);
      if (start < 0 || start > end) continue;
      for (let i = start; i <= end; i++) {
        found.set(i, {compaction: c, starts: i === start && position.has(c.fromMessageId), ends: i === end});
      }
    }
    return found;
  }

  function cutMarker(compaction, edge) {
    if (edge === "end") {
      return h("li", {class: "cut cut-end", data: {compaction: compaction.id}},
        "▲ end of the compacted range (", h("code", {text: compaction.toMessageId}), ")");
    }
    return h("li", {class: "cut cut-start", data: {compaction: compaction.id}},
      h("div", {class: "cut-title"}, "▼ compacted: from here to ", h("code", {text: compaction.toMessageId}),
        `, the model sees this summary instead (${when(compaction.createdAt)})`),
      h("div", {class: "summary", text: compaction.summary}));
  }

  function messageCard(view, message, active, cut) {
    const overlay = overlayOf(view, message);
    const classes = ["message", `role-${String(message.role).replace(/[^a-z]/gi, "") || "other"}`];
    if (isOverlay(message)) classes.push("overlay");
    else classes.push(!active || active.has(message.id) ? "on-active" : "off-active");
    if (cut) classes.push("compacted");
    if (view.newIds.has(message.id)) classes.push("new");
    const head = h("div", {class: "message-head"},
      h("span", {class: "role", text: message.role}),
      h("code", {class: "message-id", text: message.id}),
      message.createdAt ? h("span", {class: "created", text: when(message.createdAt)}) : null,
      classes.includes("off-active") ? h("span", {class: "tag tag-off", text: "off the active path"}) : null);
    const card = h("li", {class: classes.join(" "), data: {id: message.id}}, head);
    if (isOverlay(message)) card.appendChild(overlayNote(view, overlay));
    card.appendChild(partsOf(message));
    card.appendChild(messageJson(message));
    return card;
  }

  function overlayNote(view, overlay) {
    if (!overlay) return h("p", {class: "cut-note", text: "A compaction overlay (its record was not found)."});
    return h("p", {class: "cut-note"},
      "Compaction overlay: the model sees this summary in place of the stored messages ",
      h("code", {text: overlay.fromMessageId}), " … ", h("code", {text: overlay.toMessageId}),
      ` (compacted ${when(overlay.createdAt)}). `,
      h("a", {href: "#", class: "show-stored", on: {click: (event) => {
        event.preventDefault();
        go({view: "stored", focus: overlay.fromMessageId});
      }}}, "Show them"));
  }

  /** A message's parts: the first PARTS_SHOWN, then a "Show more" button per further PARTS_SHOWN. */
  function partsOf(message) {
    const parts = Array.isArray(message.parts) ? message.parts : [];
    const box = h("div", {class: "parts"}, parts.slice(0, PARTS_SHOWN).map(partView));
    if (parts.length <= PARTS_SHOWN) return box;
    const more = showMore(parts.length, PARTS_SHOWN, "parts", (from, to) =>
      box.insertBefore(append(document.createDocumentFragment(), parts.slice(from, to).map(partView)), more));
    box.appendChild(more);
    return box;
  }

  /** The message as JSON: built now for a small message, when opened for a big one. */
  function messageJson(message) {
    const big = Array.isArray(message.parts) && message.parts.length > PARTS_SHOWN;
    const body = () => longText("pre", "json", pretty(message));
    return fold("JSON", big ? body : body(), {cls: "raw"});
  }

  function partView(part) {
    const type = part && typeof part.type === "string" ? part.type : "unknown";
    if (type === "text") return longText("div", "part text", part.text ?? "");
    if (type === "reasoning") {
      return fold("reasoning", longText("div", "part-body", part.text ?? part.reasoning ?? ""), {cls: "part reasoning"});
    }
    if (type.startsWith("tool-") || type === "dynamic-tool") {
      const name = part.toolName || type.slice("tool-".length);
      const summary = [h("span", {class: "tool-name", text: name}), h("span", {class: "tool-state", text: part.state || ""}),
        part.toolCallId ? h("code", {class: "call-id", text: part.toolCallId}) : null];
      return fold(summary, h("div", {class: "part-body"},
        h("div", {class: "io-label", text: "input"}), longText("pre", "tool-input", pretty(part.input)),
        "output" in part || "result" in part ? [h("div", {class: "io-label", text: "output"}),
          longText("pre", "tool-output", pretty("output" in part ? part.output : part.result))] : null,
        part.errorText ? [h("div", {class: "io-label", text: "error"}), longText("pre", "tool-error", part.errorText)]
          : null), {cls: "part tool"});
    }
    return fold(type, longText("pre", "json", pretty(part)), {cls: "part other"});
  }

  function addBranchSwitch(view, card, message, siblings, active) {
    const index = siblings.findIndex((s) => s.id === message.id);
    const activeIndex = active ? siblings.findIndex((s) => active.has(s.id)) : index;
    const switchTo = async (k) => {
      const target = siblings[k];
      notice("Finding that branch's leaf…");
      const onActive = k === activeIndex;
      const leaf = onActive ? null : await descend(view, target.id);
      notice("");
      go({leaf, focus: target.id});
    };
    const label = `branch ${index + 1} of ${siblings.length}`
      + (activeIndex >= 0 && activeIndex !== index ? ` · the active path takes ${activeIndex + 1}` : "");
    const box = h("span", {class: "branches", data: {index: String(index + 1), of: String(siblings.length)}},
      h("button", {type: "button", class: "prev", disabled: index <= 0, title: "previous branch",
        on: {click: () => switchTo(index - 1)}}, "‹"),
      h("span", {class: "branch-label", text: label}),
      h("button", {type: "button", class: "next", disabled: index >= siblings.length - 1, title: "next branch",
        on: {click: () => switchTo(index + 1)}}, "›"));
    card.querySelector(".message-head").appendChild(box);
  }

  /** The leaf reached from a message by taking the newest child at each step. */
  async function descend(view, id) {
    let current = id;
    for (let step = 0; step < DESCEND_LIMIT; step++) {
      const children = (await api("GET", sessionPath(view.id, `messages/${seg(current)}/branches`))).messages;
      if (!children.length) return current;
      current = children[children.length - 1].id;
    }
    return current;
  }

  async function goToMessage(view, id) {
    if (view.entries && view.route.tab === "messages" && view.entries.some((m) => m.id === id)) {
      if (view.route.focus === id) flash(id);
      else go({focus: id});
      return;
    }
    try {
      const found = (await api("GET", sessionPath(view.id, `messages/${seg(id)}`))).message;
      const active = await activeIds(view);
      const leaf = active.has(found.id) ? null : await descend(view, found.id);
      go({tab: "messages", leaf, focus: id, view: view.compactions.length ? "stored" : null});  // maybe compacted
    } catch (error) {
      notice(error.message, "error");
    }
  }

  function flash(id) {
    for (const card of document.querySelectorAll("#messages > li.message")) {
      if (card.dataset.id !== id) continue;
      card.classList.add("focus");
      card.scrollIntoView({block: "center"});
      setTimeout(() => card.classList.remove("focus"), 2500);
    }
  }

  // -- context blocks, the frozen prompt, skills --------------------------------------------------------------------------

  async function renderContext(view, body, generation) {
    const id = view.id;
    const [blocks, prompt, skills] = await Promise.all([
      api("GET", sessionPath(id, "context")).then((r) => r.blocks),
      api("GET", sessionPath(id, "system-prompt")).then((r) => r.prompt),
      api("GET", sessionPath(id, "skills")).then((r) => r.loaded),
    ]);
    if (generation !== state.generation) return;
    clear(body);
    body.appendChild(h("h2", {text: "Context blocks"}));
    body.appendChild(h("ol", {id: "blocks"}, blocks.map((block) => blockView(view, block))));
    body.appendChild(h("h2", {text: "Loaded skills"}));
    body.appendChild(skills.length
      ? h("ul", {id: "skills"}, skills.map((key) => skillView(view, key)))
      : h("p", {id: "skills", class: "muted", text: "No skill is loaded."}));
    body.appendChild(h("h2", null, "System prompt ", h("span", {class: "muted small",
      text: "frozen: exactly what the model gets, until a refresh"})));
    const facts = h("p", {class: "facts"}, fact("characters", [...prompt].length), fact("lines", prompt.split("\n").length),
      state.writes ? h("button", {type: "button", id: "refresh-prompt", on: {click: async () => {
        await write(view, () => api("POST", sessionPath(id, "system-prompt:refresh")), "The prompt was rendered again.");
      }}}, "Refresh the prompt from the blocks") : null);
    body.appendChild(facts);
    body.appendChild(h("pre", {id: "system-prompt", class: "prompt", text: prompt}));
  }

  function blockView(view, block) {
    const kind = block.isSearchable ? "searchable" : block.isSkill ? "skills" : block.writable ? "writable" : "readonly";
    const usage = block.maxTokens ? `${block.tokens} / ${block.maxTokens} tokens` : `${block.tokens} tokens`;
    const item = h("li", {class: "block", data: {label: block.label}},
      h("div", {class: "block-head"},
        h("span", {class: "block-label", text: block.label}),
        h("span", {class: `tag tag-${kind}`, text: kind}),
        block.description ? h("span", {class: "muted", text: block.description}) : null,
        h("span", {class: "block-usage", text: usage}),
        block.maxTokens ? bar(block.tokens, block.maxTokens) : null),
      block.content ? h("pre", {class: "block-content", text: block.content})
        : h("p", {class: "block-content muted", text: "(empty)"}));
    if (state.writes && block.writable && !block.isSkill && !block.isSearchable) {
      item.querySelector(".block-head").appendChild(h("button", {type: "button", class: "edit",
        on: {click: () => editBlock(view, item, block)}}, "Edit"));
    }
    return item;
  }

  function editBlock(view, item, block) {
    const area = h("textarea", {class: "block-editor", rows: "8", value: block.content});
    const save = h("button", {type: "button", class: "save", on: {click: async () => {
      await write(view, () => api("PUT", sessionPath(view.id, `context/${seg(block.label)}`), {content: area.value}),
        `Block ${block.label} replaced (the frozen prompt changes on a refresh).`);
    }}}, "Save");
    const cancel = h("button", {type: "button", on: {click: () => renderTab(view, state.generation)}}, "Cancel");
    item.querySelector(".block-content").replaceWith(h("div", {class: "editor"}, area, h("div", null, save, cancel)));
  }

  function skillView(view, key) {
    const colon = key.indexOf(":");
    const label = key.slice(0, colon);
    const name = key.slice(colon + 1);
    return h("li", {class: "skill", data: {key}}, h("code", {text: key}),
      state.writes ? h("button", {type: "button", class: "unload", on: {click: async () => {
        await write(view, () => api("DELETE", sessionPath(view.id, `skills/${seg(label)}/${seg(name)}`)),
          `Unloaded ${key}.`);
      }}}, "Unload") : null);
  }

  async function write(view, call, done) {
    if (!state.writes) return;
    try {
      await call();
      notice(done);
    } catch (error) {
      notice(error.message, "error");
    }
    await refresh(view);
  }

  async function compactNow(view) {
    await write(view, async () => {
      const result = (await api("POST", sessionPath(view.id, "compact"))).result;
      if (!result) throw new Error("Nothing was compacted (too short, or the summarizer gave nothing).");
    }, "Compacted.");
  }

  // -- tools ----------------------------------------------------------------------------------------------------------

  async function renderTools(view, body, generation) {
    const tools = (await api("GET", sessionPath(view.id, "tools"))).tools;
    if (generation !== state.generation) return;
    clear(body);
    const names = Object.keys(tools);
    body.appendChild(h("h2", {text: `Tools the model gets (${names.length})`}));
    if (!names.length) body.appendChild(h("p", {class: "muted", text: "No block offers a tool."}));
    body.appendChild(h("ol", {id: "tools"}, names.map((name) => h("li", {class: "tool-def", data: {name}},
      h("h3", {text: name}),
      h("pre", {class: "tool-description", text: tools[name].description}),
      fold("input schema", h("pre", {class: "json", text: pretty(tools[name].inputSchema)}))))));
  }

  // -- live: the session's WebSocket ------------------------------------------------------------------------------------

  function setPill(view, text, live) {
    const el = $("live-pill");
    view.liveText = text;
    view.liveState = live;
    if (el && state.session === view) {
      el.textContent = text;
      el.dataset.state = live;
    }
  }

  function closeLive() {
    if (state.socket) {
      state.socket.onclose = null;
      state.socket.close(1000);
      state.socket = null;
    }
  }

  function connectLive(view) {
    closeLive();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}${BASE}${sessionPath(view.id, "ws")}`;
    const socket = new WebSocket(url, state.token ? ["durable-sessions", bearerProtocol(state.token)] : undefined);
    state.socket = socket;
    const pill = (text, live) => setPill(view, text, live);
    socket.onopen = () => {
      view.retry = 0;
      pill("live", "open");
    };
    socket.onclose = (event) => {
      if (state.socket !== socket) return;
      state.socket = null;
      view.retry = Math.min((view.retry || 0) + 1, 6);
      pill(`live: disconnected (${event.code}); retrying`, "closed");
      setTimeout(() => {
        if (state.session === view && !state.socket) connectLive(view);
      }, 500 * 2 ** view.retry);
    };
    socket.onmessage = (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      if (frame && typeof frame.type === "string" && frame.type.startsWith("cf_agent_session")) onBroadcast(view, frame);
    };
  }

  function onBroadcast(view, frame) {
    const entry = {at: new Date(), frame};
    view.live.unshift(entry);
    view.live.length = Math.min(view.live.length, LIVE_LOG_LIMIT);
    if (frame.type === "cf_agent_session") view.status = frame;
    if (state.session !== view) return;
    renderStatus(view);
    const log = $("live-log");
    if (log) log.insertBefore(liveEntry(entry), log.firstChild);
    const counter = $("live-count");
    if (counter) counter.textContent = String(view.live.length);
    if (frame.type === "cf_agent_session" && frame.phase === "idle") scheduleRefresh(view);
  }

  function scheduleRefresh(view) {
    clearTimeout(view.refreshTimer);
    view.refreshTimer = setTimeout(() => refresh(view), 100);
  }

  /** Read the session again after a change (a broadcast, or a write of ours); new messages are marked. */
  async function refresh(view) {
    if (state.session !== view) return;
    const before = new Set((view.entries || []).map((m) => m.id));
    const generation = ++state.generation;
    const y = window.scrollY;
    const atBottom = window.innerHeight + y >= document.documentElement.scrollHeight - 40;
    view.activeIds = null;
    try {
      await loadOverview(view, generation);
      if (generation !== state.generation) return;
      renderHeader(view);
      loadSessions();  // its order and counts changed
      if (view.pathKey !== pathKey(view.route)) view.entries = null;  // another path: read afresh below
      if (view.route.tab === "messages" && view.entries) {
        const first = await loadPage(view, view.route.leaf, null, view.route.stored);
        if (generation !== state.generation) return;
        const old = view.entries;
        const at = first.messages.length ? old.findIndex((m) => m.id === first.messages[0].id) : -1;
        view.entries = at > 0 ? [...old.slice(0, at), ...first.messages] : first.messages;
        view.reachedRoot = at > 0 ? view.reachedRoot : first.root;
        view.pathKey = pathKey(view.route);
        view.newIds = new Set(first.messages.map((m) => m.id).filter((id) => before.size && !before.has(id)));
      }
      // The live log and search results stay as they are, once shown (this read may have cut short their first
      // render: a tab opened just before the broadcast came is rendered here).
      const shown = $("tab-body") && $("tab-body").dataset.shown === view.route.tab;
      if (shown && (view.route.tab === "live" || view.route.tab === "search")) return;
      await renderTab(view, generation);
      if (generation === state.generation) window.scrollTo(0, atBottom ? document.documentElement.scrollHeight : y);
    } catch (error) {
      notice(error.message, "error");
    }
  }

  function renderLive(view, body) {
    clear(body);
    body.appendChild(h("p", {class: "muted"}, "Broadcasts of this session as they arrive (newest first): ",
      h("span", {id: "live-count", text: String(view.live.length)}), " so far."));
    body.appendChild(h("ol", {id: "live-log"}, view.live.map(liveEntry)));
  }

  function liveEntry(entry) {
    const frame = entry.frame;
    const time = entry.at.toISOString().slice(11, 23);
    if (frame.type !== "cf_agent_session") {
      return h("li", {class: "live error"}, h("span", {class: "time", text: time}),
        h("span", {class: "pill", data: {phase: "error"}, text: frame.type}), h("span", {text: frame.error ?? pretty(frame)}));
    }
    return h("li", {class: "live", data: {phase: frame.phase}},
      h("span", {class: "time", text: time}),
      h("span", {class: "pill", data: {phase: frame.phase}, text: frame.phase}),
      h("span", {class: "estimate", text: `${frame.tokenEstimate} tokens`}),
      h("span", {class: "muted", text: frame.tokenThreshold ? `threshold ${frame.tokenThreshold}` : "no threshold"}),
      frame.compacted ? h("span", {class: "compacted", text: `compacted from ${frame.compacted.tokensBefore} tokens`})
        : null);
  }

  // -- search -------------------------------------------------------------------------------------------------------------

  function renderSearch(view, body) {
    clear(body);
    const input = h("input", {id: "search-query", type: "search", placeholder: "Words to find in this session",
      value: view.query || "", autocomplete: "off", spellcheck: "false"});
    const results = h("ol", {id: "search-results"});
    const form = h("form", {id: "search-form", on: {submit: async (event) => {
      event.preventDefault();
      view.query = input.value;
      await runSearch(view, results);
    }}}, input, h("button", {type: "submit"}, "Search"));
    append(body, [form, results]);
    input.focus();
    if (view.query) runSearch(view, results);
  }

  async function runSearch(view, results) {
    clear(results);
    const query = view.query.trim();
    if (!query) return;
    let hits;
    try {
      hits = (await api("GET", sessionPath(view.id, `search?${new URLSearchParams({q: query, limit: "50"})}`))).results;
    } catch (error) {
      results.appendChild(h("li", {class: "error", text: error.message}));
      return;
    }
    results.dataset.count = String(hits.length);
    if (!hits.length) results.appendChild(h("li", {class: "muted", text: "Nothing found."}));
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    for (const hit of hits) {
      results.appendChild(h("li", {class: "hit", data: {id: hit.id}},
        h("a", {href: `#${new URLSearchParams({s: view.id, tab: "messages", focus: hit.id})}`,
          on: {click: (event) => {
            event.preventDefault();
            goToMessage(view, hit.id);
          }}}, h("span", {class: "role", text: hit.role}), h("code", {text: hit.id})),
        h("div", {class: "snippet"}, hit.content ? marked(around(hit.content, words), words)
          : h("span", {class: "muted", text: "(found in a tool call's input or output)"}))));
    }
  }

  /** About 300 characters of text around the first word of the query found in it. */
  function around(text, words) {
    const lower = text.toLowerCase();
    const first = Math.min(...words.map((w) => lower.indexOf(w)).filter((i) => i >= 0), text.length);
    if (text.length <= 300) return text;
    const start = first === text.length ? 0 : Math.max(0, text.lastIndexOf(" ", Math.max(0, first - 80)) + 1);
    const end = Math.min(text.length, start + 300);
    return `${start > 0 ? "…" : ""}${text.slice(start, end)}${end < text.length ? "…" : ""}`;
  }

  /** Text nodes with the query's words wrapped in <mark> (built as nodes: the text stays text). */
  function marked(text, words) {
    const lower = text.toLowerCase();
    const nodes = [];
    let at = 0;
    while (at < text.length) {
      let best = -1;
      let length = 0;
      for (const word of words) {
        const found = lower.indexOf(word, at);
        if (found >= 0 && (best < 0 || found < best)) [best, length] = [found, word.length];
      }
      if (best < 0 || nodes.length > 200) break;
      nodes.push(text.slice(at, best), h("mark", {text: text.slice(best, best + length)}));
      at = best + length;
    }
    nodes.push(text.slice(at));
    return nodes;
  }

  // -- start ---------------------------------------------------------------------------------------------------------------

  function route() {
    const current = readHash();
    if (!current.session) {
      state.generation++;
      state.session = null;
      closeLive();
      clear($("session")).appendChild(h("p", {id: "empty", class: "muted",
        text: "Pick a session on the left, or open one by id."}));
      markCurrentSession();
      return;
    }
    openSession(current);
  }

  function start() {
    takeToken();  // the first call (the session list) already carries a token handed over in the address
    const writes = $("writes");
    writes.checked = state.writes;
    writes.addEventListener("change", () => {
      state.writes = writes.checked;
      sessionStorage.setItem(WRITES_KEY, state.writes ? "1" : "0");
      document.body.classList.toggle("writes", state.writes);
      if (state.session) openSession(readHash());
    });
    document.body.classList.toggle("writes", state.writes);
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.token = $("token-input").value.trim() || null;
      if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
      else sessionStorage.removeItem(TOKEN_KEY);
      $("token-input").value = "";
      $("token-form").hidden = true;
      notice("");
      loadSessions();
      if (state.session) openSession(readHash());
    });
    let typing = null;
    $("prefix").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => loadSessions(), 200);
    });
    $("session-filter").addEventListener("submit", (event) => {
      event.preventDefault();
      loadSessions();
    });
    $("sessions-more").addEventListener("click", () => loadSessions(true));
    $("open-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const id = $("open-id").value;
      if (id) go({s: id, leaf: null, focus: null, tab: null});
    });
    window.addEventListener("hashchange", route);
    loadSessions();
    route();
  }

  start();
})();
