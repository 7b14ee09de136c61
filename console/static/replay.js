// Léa console: one replay's page — its state, its pause dialog (checklist, Continue / Cancel)
// and its timeline from the audit trail, kept live by the stream.
"use strict";

(() => {
  const { $ } = window.Lea;
  const Lea = window.Lea;
  const head = $("#replay-head");
  const replayId = head.dataset.replayId;
  const base = `/api/replays/${encodeURIComponent(replayId)}`;
  let pause = null;      // the pause shown (API PauseView), or null
  let pauseKey = null;   // which pause the checklist was built for (ticks survive refreshes)
  let busy = false;      // a resume or cancel is on its way
  let detailTries = 0;
  let refreshTimer = null;
  const INPUT_REASONS = new Set(["failed_after_input", "input_unknown"]);

  // The pause dialog ---------------------------------------------------------------------------
  function ticked() {
    return [...document.querySelectorAll("#check-list .check-box")]
      .filter((box) => box.checked).map((box) => box.value);
  }

  function missingRequired() {
    if (!pause) return [];
    const done = new Set(ticked());
    return pause.checks.filter((c) => c.required && !done.has(c.id));
  }

  function updateContinue() {
    const missing = missingRequired();
    const hint = $("#pause-hint");
    if (!Lea.mayAnswer()) {
      // A viewer has no buttons (the page has none to show them) and is asked nothing.
      hint.textContent = "";
      return;
    }
    $("#continue").disabled = busy || missing.length > 0;
    $("#cancel").disabled = busy;
    $("#redo").disabled = busy || missing.length > 0;
    $("#pause-now").disabled = busy;
    if (!pause) return;
    if (missing.length === 1) {
      hint.textContent = "Cochez encore 1 vérification obligatoire pour pouvoir continuer.";
    } else if (missing.length > 1) {
      hint.textContent = `Cochez encore ${missing.length} vérifications obligatoires pour pouvoir continuer.`;
    } else if (pause.checks.length) {
      hint.textContent = "Toutes les vérifications obligatoires sont cochées : vous pouvez continuer.";
    } else {
      hint.textContent = "Regardez l'écran du poste, puis choisissez « Continuer » ou « Arrêter le replay ».";
    }
    hint.dataset.missing = String(missing.length);
  }

  function buildChecks(checks) {
    const list = $("#check-list");
    list.replaceChildren();
    $("#pause-checks").hidden = checks.length === 0;
    checks.forEach((check, i) => {
      const li = $("#check-template").content.firstElementChild.cloneNode(true);
      const box = li.querySelector(".check-box");
      if (Lea.mayAnswer()) {
        box.value = check.id;
        box.id = `check-${i}`;
        box.addEventListener("change", updateContinue);
      } else {
        box.remove(); // a viewer reads the checks; the operator ticks them
      }
      li.dataset.checkId = check.id;
      li.querySelector(".check-label").textContent = check.label;
      li.querySelector(".badge.required").hidden = !check.required;
      li.querySelector(".badge.optional").hidden = check.required;
      li.querySelector(".badge.system").hidden = check.source !== "system";
      if (check.source === "llm_contextual") {
        const badge = li.querySelector(".badge.lea");
        const why = check.evidence || "Suggestion de Léa, d'après l'écran du poste.";
        badge.hidden = false;
        badge.querySelector(".tip").textContent = `Ce que Léa a vu : ${why}`;
        badge.setAttribute("aria-label", `Suggestion de Léa. Ce qu'elle a vu : ${why}`);
        li.classList.add("from-lea");
      }
      list.append(li);
    });
  }

  function renderPause(next) {
    const panel = $("#pause");
    pause = next;
    if (!next) {
      panel.hidden = true;
      pauseKey = null;
      return;
    }
    $("#pause-message").textContent = next.message;
    // A step whose input may have gone out is not redone unless the person says so.
    if (Lea.mayAnswer()) $("#redo").hidden = !INPUT_REASONS.has(next.reason);
    $("#pause-reason").textContent = next.reason_label;
    $("#pause-step").hidden = !next.action_id;
    // The intention is what people read; the id stays beside it, small, for support.
    $("#pause-step-intention").textContent = next.intention || next.action_id || "";
    $("#pause-step-id").textContent = next.intention ? next.action_id : "";
    const loop = $("#pause-loop");
    loop.hidden = !next.loop;
    if (next.loop) {
      $("#pause-signal").textContent = next.loop.signal_label;
      const list = $("#pause-evidence");
      list.replaceChildren();
      for (const item of next.loop.evidence) {
        const dt = document.createElement("dt");
        const dd = document.createElement("dd");
        dt.textContent = item.label;
        dd.textContent = item.value;
        list.append(dt, dd);
      }
    }
    const shot = next.screenshot;
    $("#pause-shot").hidden = !shot;
    $("#pause-shot-none").hidden = Boolean(shot) || next.detail_pending;
    if (shot && $("#pause-shot-img").getAttribute("src") !== shot.url) {
      $("#pause-shot-img").src = shot.url;
      $("#pause-shot-link").href = shot.url;
    }
    const key = JSON.stringify([next.reason, next.message, next.checks.map((c) => c.id)]);
    if (key !== pauseKey) {
      pauseKey = key;
      buildChecks(next.checks);
      panel.hidden = false;
      panel.scrollIntoView({ block: "start" });
    }
    panel.hidden = false;
    updateContinue();
  }

  async function loadDetail() {
    const reply = await Lea.api("GET", base);
    if (!reply.ok) return;
    Lea.fillReplay(head, reply.data.replay);
    showTools(reply.data.replay.status);
    renderPause(reply.data.pause);
    if (reply.data.pause && reply.data.pause.detail_pending && detailTries < 20) {
      detailTries += 1;
      setTimeout(loadDetail, 500); // the audit trail is a moment behind the dispatcher
    } else {
      detailTries = 0;
    }
  }

  function refusal(data) {
    const labels = new Map((pause ? pause.checks : []).map((c) => [c.id, c.label]));
    switch (data.error) {
      case "required_checks_missing": {
        const names = (data.missing || []).map((id) => `« ${labels.get(id) || id} »`);
        return `Reprise refusée : cochez d'abord ${names.join(", ")}. Léa reste en pause.`;
      }
      case "not_paused":
        return "Ce replay n'est plus en pause : quelqu'un a déjà répondu, ou il a été arrêté.";
      case "not_running":
        return "Ce replay est déjà terminé ou arrêté.";
      case "unknown_check_ids":
        return "La liste des vérifications a changé : relisez-la, puis réessayez.";
      case "timeout":
        return "Le serveur n'a pas répondu à temps. Votre réponse n'a peut-être pas été prise en compte : regardez l'état du replay avant de réessayer.";
      case "role_forbidden":
        return "Votre compte ne permet pas de répondre aux replays (lecture seule). Rien n'a été fait.";
      case "network":
        return "Pas de connexion avec la console. Vérifiez le réseau, puis réessayez.";
      default:
        return `Action refusée (${data.error || "erreur"}) : ${data.message || ""}`;
    }
  }

  async function answer(action, body, success) {
    busy = true;
    updateContinue();
    const reply = await Lea.api("POST", `${base}/${action}`, body);
    busy = false;
    if (reply.ok) Lea.toast(success, "ok");
    else Lea.toast(refusal(reply.data), "error");
    updateContinue();
    await loadDetail();
  }

  function on(selector, handler) {
    const button = $(selector);
    if (button) button.addEventListener("click", handler); // a viewer's page has none
  }

  on("#continue", () => {
    answer("resume", { acknowledged_check_ids: ticked() }, "C'est noté : Léa reprend le replay.");
  });
  on("#redo", () => {
    if (!window.confirm("Léa va refaire cette étape. Continuez seulement si l'écran montre qu'elle n'a pas été faite.")) return;
    answer("resume", { acknowledged_check_ids: ticked(), step: "redo" },
      "C'est noté : Léa refait l'étape.");
  });
  on("#cancel", () => {
    if (!window.confirm("Arrêter définitivement ce replay ? Léa ne fera plus aucune de ses étapes sur le poste.")) return;
    answer("cancel", {}, "Le replay est arrêté.");
  });

  on("#pause-now", () => {
    answer("pause", {}, "C'est noté : Léa se met en pause avant l'étape suivante.");
  });

  function showTools(status) {
    const tools = $("#running-tools");
    if (tools) tools.hidden = status !== "running";
  }

  // The timeline ------------------------------------------------------------------------------
  function addEntry(entry) {
    const li = $("#entry-template").content.firstElementChild.cloneNode(true);
    li.dataset.seq = entry.seq;
    li.dataset.kind = entry.kind;
    const time = li.querySelector('[data-field="at"]');
    time.setAttribute("datetime", new Date(entry.at * 1000).toISOString());
    time.textContent = Lea.clock(entry.at);
    li.querySelector('[data-field="text"]').textContent = entry.text;
    const shots = li.querySelector('[data-field="shots"]');
    for (const shot of entry.screenshots) {
      if (shot.state === "stored") {
        const a = document.createElement("a");
        a.href = shot.url; a.target = "_blank"; a.rel = "noopener"; a.className = "shot";
        const img = document.createElement("img");
        img.src = shot.url; img.loading = "lazy";
        img.alt = img.title = `Capture « ${shot.name} »`;
        a.append(img);
        shots.append(a);
      } else {
        const gone = document.createElement("span");
        gone.className = "shot-gone";
        gone.textContent = `capture ${shot.name} supprimée`;
        shots.append(gone);
      }
    }
    $("#timeline").append(li);
  }

  async function loadTimeline() {
    const list = $("#timeline");
    const after = Number(list.dataset.lastSeq || 0);
    const reply = await Lea.api("GET", `${base}/timeline?after_seq=${after}`);
    if (!reply.ok) return;
    for (const entry of reply.data.entries) {
      if (entry.seq > Number(list.dataset.lastSeq || 0)) addEntry(entry);
    }
    list.dataset.lastSeq = String(Math.max(after, reply.data.last_seq));
  }

  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => { loadTimeline(); loadDetail(); }, 250);
  }

  document.addEventListener("DOMContentLoaded", () => {
    updateContinue();
    showTools(head.dataset.status);
    loadDetail();
    Lea.stream({
      snapshot(data) {
        const row = data.replays.find((r) => r.replay_id === replayId);
        if (row) Lea.fillReplay(head, row);
        refreshSoon();
      },
      replay(row) {
        if (row.replay_id !== replayId) return;
        const changed = row.status !== head.dataset.status;
        Lea.fillReplay(head, row);
        if (changed) loadDetail();
      },
      event(data) { if (data.replay_id === replayId) refreshSoon(); },
    });
  });
})();
