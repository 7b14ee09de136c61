// Léa console: the work queues (docs/queues.md, "At the console") — the queues with their
// counts and the agents; one queue's items, adding a file (with its per-row report), opening
// an item (its values and history: a view the server records) and the commands the role
// allows. Kept fresh by asking the API every few seconds.
"use strict";

(() => {
  const { $ } = window.Lea;
  const Lea = window.Lea;
  const REFRESH_MS = 3000;
  const itemStates = JSON.parse($("#item-states").textContent);
  let refreshTimer = null;

  const setField = (el, field, text) => {
    const part = el.querySelector(`[data-field="${field}"]`);
    if (part) part.textContent = text;
    return part;
  };

  const clockOf = (at) => (at ? new Date(at * 1000).toLocaleString("fr-FR") : "—");

  function waited(seconds) {
    if (seconds < 1) return "—";
    if (seconds < 120) return `${Math.floor(seconds)} s`;
    if (seconds < 7200) return `${Math.floor(seconds / 60)} min`;
    return `${Math.floor(seconds / 3600)} h`;
  }

  function fillCounts(el, counts) {
    el.replaceChildren();
    for (const [state, label] of Object.entries(itemStates)) {
      if (!counts[state]) continue;
      const span = document.createElement("span");
      span.className = "count";
      span.dataset.state = state;
      span.title = label;
      const strong = document.createElement("strong");
      strong.textContent = String(counts[state]);
      span.append(`${label} : `, strong, " ");
      el.append(span);
    }
  }

  function dispatcherDown(down) {
    const banner = $("#dispatcher-down");
    if (banner) banner.hidden = !down;
  }

  function schedule(refresh) {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, REFRESH_MS);
  }

  // The queues and the agents -----------------------------------------------------------------
  async function refreshQueues() {
    const reply = await Lea.api("GET", "/api/queues");
    dispatcherDown(!reply.ok && reply.status >= 500);
    if (reply.ok) {
      const body = $("#queue-rows");
      body.replaceChildren();
      for (const q of reply.data.queues) {
        const tr = $("#queue-row-template").content.firstElementChild.cloneNode(true);
        tr.dataset.queue = q.name;
        setField(tr, "name", q.name);
        tr.querySelector('[data-field="link"]').href = `/queues/${encodeURIComponent(q.name)}`;
        setField(tr, "pool", q.pool);
        setField(tr, "workflow_id", q.workflow_id);
        fillCounts(tr.querySelector('[data-field="counts"]'), q.counts);
        setField(tr, "total", String(q.total));
        setField(tr, "oldest_waiting", waited(q.oldest_waiting_s));
        setField(tr, "at_risk", String(q.at_risk));
        body.append(tr);
      }
      $("#no-queues").hidden = reply.data.queues.length > 0;
      const agents = $("#agent-rows");
      agents.replaceChildren();
      for (const a of reply.data.agents) {
        const tr = $("#agent-row-template").content.firstElementChild.cloneNode(true);
        tr.dataset.machineId = a.machine_id;
        tr.dataset.state = a.state;
        setField(tr, "machine_id", a.machine_id);
        setField(tr, "pool", a.pool);
        setField(tr, "state_label", a.state_label);
        agents.append(tr);
      }
    }
    schedule(refreshQueues);
  }

  // One queue -----------------------------------------------------------------------------------
  function startQueue() {
    const name = $("#queue-head").dataset.queue;
    const base = `/api/queues/${encodeURIComponent(name)}`;
    let opened = null; // the reference of the item shown, and when it last changed
    let openedAt = 0;

    function fillItem(tr, item) {
      tr.dataset.reference = item.reference;
      tr.dataset.state = item.state;
      tr.dataset.commands = item.commands.join(" ");
      setField(tr, "reference", item.reference);
      setField(tr, "state_label", item.state_label);
      setField(tr, "reason_label", item.reason_label || "");
      setField(tr, "machine_id", item.machine_id || "—");
      setField(tr, "attempts", String(item.attempts));
      const deadline = tr.querySelector('[data-field="deadline"]');
      deadline.replaceChildren(item.deadline ? clockOf(item.deadline) : "—");
      const late = document.createElement("span");
      late.className = "badge required";
      late.textContent = "en retard";
      late.hidden = !item.at_risk;
      deadline.append(" ", late);
      setField(tr, "output_names", item.output_names.join(", ") || "—");
      for (const button of tr.querySelectorAll("button.command")) {
        button.hidden = !item.commands.includes(button.dataset.command);
      }
    }

    async function refreshItems() {
      const state = $("#state-filter").value;
      const reply = await Lea.api("GET", state ? `${base}?state=${encodeURIComponent(state)}` : base);
      dispatcherDown(!reply.ok && reply.status >= 500);
      if (reply.ok) {
        fillCounts($("#queue-counts"), reply.data.queue.counts);
        const body = $("#item-rows");
        body.replaceChildren();
        for (const item of reply.data.items) {
          const tr = $("#item-row-template").content.firstElementChild.cloneNode(true);
          fillItem(tr, item);
          body.append(tr);
          if (item.reference === opened && item.updated_at !== openedAt) openItem(opened);
        }
        $("#no-items").hidden = reply.data.items.length > 0;
        $("#matching").textContent = `${reply.data.matching} élément(s)`;
      }
      schedule(refreshItems);
    }

    function fillPairs(list, pairs) {
      list.replaceChildren();
      for (const [key, value] of Object.entries(pairs)) {
        const dt = document.createElement("dt");
        dt.textContent = key;
        const dd = document.createElement("dd");
        dd.textContent = value;
        dd.dataset.name = key;
        list.append(dt, dd);
      }
    }

    async function openItem(reference) {
      const reply = await Lea.api("GET", `${base}/item?reference=${encodeURIComponent(reference)}`);
      if (!reply.ok) {
        Lea.toast(`Impossible d'ouvrir l'élément ${reference} : ${reply.data.message || reply.status}`);
        return;
      }
      const item = reply.data;
      opened = item.reference;
      openedAt = item.updated_at;
      const panel = $("#item");
      panel.dataset.reference = item.reference;
      panel.dataset.state = item.state;
      for (const field of ["reference", "state_label", "priority"]) setField(panel, field, item[field]);
      setField(panel, "reason_label", item.reason_label || "");
      setField(panel, "attempts", String(item.attempts));
      fillPairs($("#item-inputs"), item.inputs);
      fillPairs($("#item-outputs"), item.outputs);
      $("#no-outputs").hidden = Object.keys(item.outputs).length > 0;
      const history = $("#item-history");
      history.replaceChildren();
      for (const entry of item.history) {
        const li = $("#history-template").content.firstElementChild.cloneNode(true);
        li.dataset.state = entry.state;
        setField(li, "at", clockOf(entry.at));
        setField(li, "state_label", entry.state_label);
        setField(li, "reason_label", entry.reason_label || "");
        setField(li, "machine_id", entry.machine_id || "");
        if (entry.replay_id) {
          const link = li.querySelector('[data-field="replay"]');
          link.href = `/replays/${encodeURIComponent(entry.replay_id)}`;
          link.textContent = "voir le replay";
          link.hidden = false;
        }
        history.append(li);
      }
      panel.hidden = false;
    }

    const COMMAND_WORDS = { retry: "relancé", skip: "ignoré (traité hors de Léa)", cancel: "annulé" };

    async function command(reference, name) {
      if (name === "cancel" && !window.confirm(`Annuler l'élément ${reference} ? Son replay est arrêté.`)) return;
      const reply = await Lea.api("POST", `${base}/${name}`, { reference });
      if (reply.ok) {
        Lea.toast(`Élément ${reference} ${COMMAND_WORDS[name]}.`, "ok");
      } else {
        Lea.toast(`Refusé : ${reply.data.message || reply.data.error || reply.status}`);
      }
      if (opened === reference) openItem(reference);
      refreshItems();
    }

    $("#item-rows").addEventListener("click", (event) => {
      const button = event.target.closest("button");
      const tr = event.target.closest("tr.item");
      if (!button || !tr) return;
      if (button.classList.contains("open-item")) openItem(tr.dataset.reference);
      else if (button.dataset.command) command(tr.dataset.reference, button.dataset.command);
    });
    $("#state-filter").addEventListener("change", refreshItems);

    function report(data) {
      const box = $("#file-report");
      $("#file-report-title").textContent = `Fichier refusé : aucun élément n'a été ajouté. ${data.message || ""}`;
      const problems = $("#file-problems");
      problems.replaceChildren();
      for (const text of (data.detail && data.detail.problems) || []) {
        const li = document.createElement("li");
        li.textContent = text;
        problems.append(li);
      }
      const rows = (data.detail && data.detail.rows) || [];
      const body = $("#file-rows tbody");
      body.replaceChildren();
      for (const row of rows) {
        const tr = document.createElement("tr");
        tr.dataset.row = String(row.row);
        for (const text of [row.row, row.line || "", row.reference || "", row.problems.join(" ; ")]) {
          const td = document.createElement("td");
          td.textContent = String(text);
          tr.append(td);
        }
        body.append(tr);
      }
      $("#file-rows").hidden = rows.length === 0;
      const refused = (data.detail && data.detail.refused) || rows.length;
      $("#file-more").hidden = refused <= rows.length;
      $("#file-more").textContent = `… et ${refused - rows.length} autre(s) ligne(s) refusée(s).`;
      box.hidden = false;
    }

    function base64Of(buffer) {
      const bytes = new Uint8Array(buffer);
      let text = "";
      for (let i = 0; i < bytes.length; i += 0x8000) {
        text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      }
      return btoa(text);
    }

    const form = $("#add-form");
    if (form) {
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const file = $("#add-file-input").files[0];
        if (!file) return;
        $("#add-submit").disabled = true;
        try {
          const reply = await Lea.api("POST", `${base}/items`, {
            filename: file.name, content_base64: base64Of(await file.arrayBuffer()) });
          if (reply.ok) {
            $("#file-report").hidden = true;
            Lea.toast(`${reply.data.added} élément(s) ajouté(s) à la file.`, "ok");
            form.reset();
            refreshItems();
          } else if (reply.data.error === "items_refused" || reply.data.error === "no_items") {
            report(reply.data);
          } else {
            Lea.toast(`Fichier non ajouté : ${reply.data.message || reply.data.error || reply.status}`);
          }
        } finally {
          $("#add-submit").disabled = false;
        }
      });
    }
    schedule(refreshItems);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#live").dataset.state = "live";
    $("#live").textContent = "● Mis à jour toutes les 3 s";
    Lea.localizeTimes();
    if (document.body.dataset.page === "queues") schedule(refreshQueues);
    else if (document.body.dataset.page === "queue") startQueue();
  });
})();
