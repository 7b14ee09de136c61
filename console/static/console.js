// Léa console: what every page shares (who is signed in, API calls, toasts, the live stream)
// and the replay list. Plain browser JavaScript, no build step, nothing loaded from elsewhere.
"use strict";

(() => {
  const $ = (selector, root = document) => root.querySelector(selector);
  let toastTimer = null;

  const Lea = {
    $,

    // The signed-in account (the server renders it into <body>); the API decides anyway.
    account() { return document.body.dataset.account || ""; },
    mayAnswer() { return document.body.dataset.mayAnswer === "yes"; },

    // A call to the console's API: {ok, status, data}; never throws.
    async api(method, path, body) {
      const options = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
      if (body !== undefined) {
        options.headers["Content-Type"] = "application/json";
        options.body = JSON.stringify(body);
      }
      let response;
      try {
        response = await fetch(path, options);
      } catch (error) {
        return { ok: false, status: 0, data: { error: "network", message: String(error) } };
      }
      if (response.status === 401 && document.body.dataset.page !== "signin") {
        location.reload(); // the sign-in page comes instead (session expired or closed)
      }
      let data = {};
      try { data = await response.json(); } catch (_) { /* an empty body */ }
      return { ok: response.ok, status: response.status, data: data || {} };
    },

    toast(text, kind = "error") {
      const toast = $("#toast");
      toast.textContent = text;
      toast.dataset.kind = kind;
      toast.hidden = false;
      clearTimeout(toastTimer);
      toastTimer = setTimeout(() => { toast.hidden = true; }, kind === "error" ? 12000 : 5000);
    },

    clock(at) {
      return new Date(at * 1000).toLocaleTimeString("fr-FR");
    },

    localizeTimes(root = document) {
      for (const el of root.querySelectorAll("time[datetime]")) {
        if (el.getAttribute("datetime")) {
          el.textContent = new Date(el.getAttribute("datetime")).toLocaleTimeString("fr-FR");
        }
      }
    },

    // Show one replay (an API ReplayRow) in an element made of data-field parts.
    fillReplay(el, row) {
      const set = (field, text) => {
        const part = el.querySelector(`[data-field="${field}"]`);
        if (part) part.textContent = text;
      };
      el.dataset.replayId = row.replay_id;
      el.dataset.status = row.status;
      set("machine_id", row.machine_id);
      set("workflow_label", row.workflow_label);
      set("status_label", row.status_label);
      set("progress_label", row.progress_label);
      set("step_label", row.step_label || "—");
      const workflow = el.querySelector('[data-field="workflow_label"]');
      if (workflow) workflow.title = row.workflow_id;
      const step = el.querySelector('[data-field="step_label"]');
      if (step) step.title = row.current_step || "";
      set("last_event", row.last_event ? row.last_event.text : "—");
      const bar = el.querySelector('[data-field="progress"]');
      if (bar) { bar.max = Math.max(1, row.total); bar.value = row.completed_actions; }
      const link = el.querySelector('[data-field="link"]');
      if (link) {
        link.href = `/replays/${encodeURIComponent(row.replay_id)}`;
        // Only a person who may answer is asked to (a viewer reads the details).
        link.textContent = row.status === "paused_need_help" && Lea.mayAnswer() ? "Répondre" : "Détails";
      }
    },

    // The live stream: handlers by event name; reconnects by itself.
    stream(handlers) {
      const live = $("#live");
      const state = (name, text) => { live.dataset.state = name; live.textContent = text; };
      let source = null;
      const open = () => {
        source = new EventSource("/api/events");
        source.onopen = () => state("live", "● En direct");
        source.onerror = () => {
          state("down", "○ Connexion perdue — nouvelle tentative…");
          if (source.readyState !== EventSource.CLOSED) return; // the browser tries again
          // Refused for good (a 401 once the session ended): Lea.api reloads to the
          // sign-in page then; otherwise try again a little later.
          Lea.api("GET", "/api/me").then((reply) => { if (reply.ok) setTimeout(open, 2000); });
        };
        source.addEventListener("status", (event) => {
          const data = JSON.parse(event.data);
          const banner = $("#dispatcher-down");
          if (banner) banner.hidden = data.dispatcher !== "unreachable";
        });
        source.addEventListener("resync", () => { source.close(); setTimeout(open, 1000); });
        source.addEventListener("session_ended", () => { source.close(); location.reload(); });
        for (const [name, handler] of Object.entries(handlers)) {
          source.addEventListener(name, (event) => handler(JSON.parse(event.data)));
        }
      };
      open();
    },
  };
  window.Lea = Lea;

  // The replay list --------------------------------------------------------------------------
  function rowOf(replayId) {
    return document.querySelector(`#replay-rows tr[data-replay-id="${CSS.escape(replayId)}"]`);
  }

  function upsertRow(row) {
    let tr = rowOf(row.replay_id);
    const body = $("#replay-rows");
    if (!tr) {
      tr = $("#replay-row-template").content.firstElementChild.cloneNode(true);
      body.prepend(tr);
    }
    const wasWaiting = tr.dataset.status === "paused_need_help";
    Lea.fillReplay(tr, row);
    if (row.status === "paused_need_help" && !wasWaiting) body.prepend(tr);
  }

  function refreshSummary() {
    const rows = document.querySelectorAll("#replay-rows tr[data-replay-id]");
    const waiting = [...rows].filter((tr) => tr.dataset.status === "paused_need_help").length;
    $("#waiting").hidden = waiting === 0;
    const whose = Lea.mayAnswer() ? "votre validation" : "la réponse d'un opérateur";
    $("#waiting-text").textContent = waiting === 1
      ? `1 replay attend ${whose}.`
      : `${waiting} replays attendent ${whose}.`;
    $("#no-replays").hidden = rows.length > 0;
    // Seen from another tab too: the tab's title counts the replays waiting.
    document.title = waiting ? `(${waiting}) Léa attend ${whose}` : baseTitle;
  }

  const baseTitle = document.title;

  function startList() {
    Lea.stream({
      snapshot(data) {
        $("#replay-rows").replaceChildren();
        for (const row of [...data.replays].reverse()) upsertRow(row);
        refreshSummary();
      },
      replay(row) { upsertRow(row); refreshSummary(); },
    });
  }

  // Whom to ask, as the sign-in page says it (LEA_CONSOLE_HELP_CONTACT).
  function contact() {
    const who = $("#signin-help strong");
    return who ? who.textContent : "l'administrateur de Léa";
  }

  function startSignin() {
    $("#signin-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const reply = await Lea.api("POST", "/api/login", {
        account: $("#signin-account").value, password: $("#signin-password").value });
      $("#signin-password").value = "";
      if (reply.ok) { location.reload(); return; }
      switch (reply.data.error) {
        case "login_rate_limited": {
          const minutes = Math.max(1, Math.ceil((reply.data.detail.retry_after_s || 60) / 60));
          Lea.toast(`Trop d'essais manqués : réessayez dans ${minutes} min.`);
          break;
        }
        case "account_disabled":
          Lea.toast(`Ce compte est désactivé. Adressez-vous à ${contact()}.`);
          break;
        case "no_role":
          Lea.toast(`Votre compte n'a pas accès à Léa : il n'est dans aucun de ses groupes de l'annuaire. Adressez-vous à ${contact()}.`);
          break;
        case "directory_unavailable":
          Lea.toast("L'annuaire de l'hôpital ne répond pas : réessayez dans un moment.");
          break;
        case "login_failed":
          Lea.toast("Identifiant ou mot de passe incorrect.");
          break;
        default:
          Lea.toast(`Connexion impossible (${reply.data.error || "erreur"}) : ${reply.data.message || ""}`);
      }
    });
  }

  function setUpLogout() {
    const button = $("#logout");
    if (!button) return;
    button.addEventListener("click", async () => {
      await Lea.api("POST", "/api/logout", {});
      location.reload();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    Lea.localizeTimes();
    const page = document.body.dataset.page;
    if (page === "signin") { startSignin(); return; }
    if (page === "problem") return;
    setUpLogout();
    if (page === "list") startList();
  });
})();
