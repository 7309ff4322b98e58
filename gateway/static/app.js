// The gateway's page: plain JavaScript, no build step. It calls GET /languages, GET /v1/models,
// POST /v1/translate and, for "Detect language" (source "auto"), LibreTranslate's POST /translate
// of the gateway that serves it, and for a file LibreTranslate's POST /translate_file, and writes every piece of returned text with textContent (never
// as HTML).
"use strict";

(function () {
  const AUTO = "auto"; // "Detect language": LibreTranslate's source "auto"
  const COPIED_MS = 2000; // how long "Copied" shows
  const NBEST = 4; // "Alternatives": the best 4 hypotheses of the gateway's beam (--beam, 4 by default)

  const $ = (id) => document.getElementById(id);
  const el = {
    form: $("form"),
    source: $("source"),
    target: $("target"),
    swap: $("swap"),
    detected: $("detected"),
    copy: $("copy"),
    copied: $("copied"),
    text: $("text"),
    count: $("count"),
    alternatives: $("alternatives"),
    attention: $("attention"),
    translate: $("translate"),
    status: $("status"),
    error: $("error"),
    model: $("model"),
    result: $("result"),
    translation: $("translation"),
    warning: $("warning"),
    hypothesesSection: $("hypotheses-section"),
    hypotheses: $("hypotheses"),
    attentionSection: $("attention-section"),
    attentionMaps: $("attention-maps"),
    fileForm: $("file-form"),
    file: $("file"),
    fileFormats: $("file-formats"),
    translateFile: $("translate-file"),
    fileStatus: $("file-status"),
    fileLink: $("file-link"),
  };

  const state = {
    languages: new Map(), // code -> {code, name, targets}
    maxChars: 0, // the server's characters-per-text limit, 0 while unknown
    busy: false,
    detected: "", // with source "auto": the language the last translation detected, "" while none
    copiedTimer: 0,
  };

  // ---- small helpers -------------------------------------------------------------------------

  function make(tag, props, children) {
    const node = document.createElement(tag);
    if (props) {
      for (const [key, value] of Object.entries(props)) {
        if (key === "text") node.textContent = value;
        else if (key === "class") node.className = value;
        else node.setAttribute(key, value);
      }
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function nameOf(code) {
    const lang = state.languages.get(code);
    return lang && lang.name ? lang.name : code;
  }

  function showError(message) {
    el.error.textContent = message;
    el.error.hidden = false;
  }

  function clearError() {
    el.error.textContent = "";
    el.error.hidden = true;
  }

  // A JSON request to the gateway. Resolves to the parsed body of a 2xx answer; rejects with an
  // Error whose message is the one to show (the gateway's {"error": ...} when it sent one).
  async function api(path, body) {
    const init = body === undefined
      ? { headers: { Accept: "application/json" } }
      : { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json" },
          body: JSON.stringify(body) };
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new Error("Could not reach the translation service (" + (e && e.message ? e.message : e) +
                      "). Check the connection and try again.");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      data = null;
    }
    if (!response.ok) {
      const message = data && typeof data.error === "string" && data.error
        ? data.error
        : (response.statusText || "request failed");
      const err = new Error(describeStatus(response.status) + message);
      err.status = response.status;
      throw err;
    }
    if (data === null) throw new Error("The translation service sent an answer that is not JSON.");
    return data;
  }

  function describeStatus(status) {
    if (status === 400) return "";
    if (status === 403) return "Not allowed: ";
    if (status === 429) return "Too many requests, try again shortly: ";
    if (status === 504) return "The translation took too long: ";
    if (status === 503) return "The translation service is unavailable: ";
    return "Error " + status + ": ";
  }

  // ---- languages -----------------------------------------------------------------------------

  // Detect language: every language some source translates into; the default target is
  // English's first (as /frontend/settings says), else the first.
  function autoTargets() {
    const all = [];
    for (const lang of state.languages.values()) {
      for (const code of lang.targets) if (!all.includes(code)) all.push(code);
    }
    return all;
  }

  function fillTargets(keep) {
    const auto = el.source.value === AUTO;
    const lang = state.languages.get(el.source.value);
    const targets = auto ? autoTargets() : (lang ? lang.targets : []);
    el.target.replaceChildren(...targets.map((code) => make("option", { value: code, text: nameOf(code) + " (" + code + ")" })));
    const en = state.languages.get("en");
    if (keep && targets.includes(keep)) el.target.value = keep;
    else if (auto && en && en.targets.length) el.target.value = en.targets[0];
    el.target.disabled = targets.length === 0;
    updateSwap();
  }

  // The language the text is in: the chosen one, or with "Detect language" the detected one
  // ("" until a translation detected it; swapping waits for that).
  function fromLanguage() {
    return el.source.value === AUTO ? state.detected : el.source.value;
  }

  function updateSwap() {
    const from = fromLanguage();
    const back = state.languages.get(el.target.value);
    el.swap.disabled = !(from && back && back.targets.includes(from));
  }

  function showDetected(detected) {
    state.detected = "";
    if (!detected || typeof detected.language !== "string") {
      el.detected.textContent = "";
      el.detected.hidden = true;
    } else if (!(Number(detected.confidence) > 0)) {
      el.detected.textContent = "Language not detected";
      el.detected.hidden = false;
    } else {
      state.detected = detected.language;
      el.detected.textContent = "Detected: " + nameOf(detected.language) + " (" +
        Math.round(Number(detected.confidence)) + "%)";
      el.detected.hidden = false;
    }
    updateSwap();
  }

  async function loadLanguages() {
    let list;
    try {
      list = await api("/languages");
    } catch (e) {
      el.source.replaceChildren(make("option", { value: "", text: "unavailable" }));
      el.target.replaceChildren(make("option", { value: "", text: "unavailable" }));
      showError("Could not load the languages: " + e.message);
      return;
    }
    for (const lang of Array.isArray(list) ? list : []) {
      if (lang && typeof lang.code === "string") {
        state.languages.set(lang.code, { code: lang.code, name: lang.name || lang.code,
                                         targets: Array.isArray(lang.targets) ? lang.targets : [] });
      }
    }
    const sources = [...state.languages.values()].filter((lang) => lang.targets.length > 0);
    if (sources.length === 0) {
      showError("The translation service has no language pairs.");
      return;
    }
    el.source.replaceChildren(make("option", { value: AUTO, text: "Detect language" }),
                              ...sources.map((lang) => make("option", { value: lang.code, text: lang.name + " (" + lang.code + ")" })));
    el.source.value = AUTO; // LibreTranslate's default
    el.source.disabled = false;
    fillTargets(null);
    el.translate.disabled = false;
  }

  async function loadLimits() {
    try {
      const data = await api("/v1/models");
      const models = Array.isArray(data) ? data : (data && Array.isArray(data.models) ? data.models : []);
      const limits = models.map((m) => Number(m && ((m.limits && m.limits.max_chars_per_text) || m.max_chars_per_text)) || 0)
        .filter((n) => n > 0);
      if (limits.length) state.maxChars = Math.min(...limits);
      const names = models.map((m) => m && m.name).filter(Boolean);
      if (names.length) el.model.textContent = "Model: " + names.join(", ");
    } catch (e) {
      // The limits only inform the character count; translating works without them.
    }
    updateCount();
  }

  function updateCount() {
    const n = [...el.text.value].length; // code points, as the server counts them
    if (state.maxChars) {
      el.count.textContent = n + " / " + state.maxChars + " characters";
      el.count.classList.toggle("over", n > state.maxChars);
    } else {
      el.count.textContent = n === 1 ? "1 character" : n + " characters";
    }
  }

  // ---- translating ---------------------------------------------------------------------------

  function setBusy(busy) {
    state.busy = busy;
    el.translate.disabled = busy;
    el.translate.textContent = busy ? "Translating…" : "Translate";
    el.form.setAttribute("aria-busy", String(busy));
    el.result.setAttribute("aria-busy", String(busy));
    document.body.classList.toggle("busy", busy);
    el.status.textContent = busy ? "Translating…" : "";
  }

  async function translate() {
    if (state.busy) return;
    clearError();
    const text = el.text.value;
    if (!text.trim()) {
      el.result.hidden = true;
      showError("Enter a text to translate.");
      el.text.focus();
      return;
    }
    if (!el.source.value || !el.target.value) {
      showError("Choose a source and a target language.");
      return;
    }
    const alternatives = el.alternatives.checked;
    const attention = el.attention.checked;
    const target = el.target.value;
    setBusy(true);
    const started = performance.now();
    let done = "";
    try {
      let source = el.source.value;
      if (source === AUTO) {
        // LibreTranslate's call detects the language and translates from it; the alternatives
        // and attention maps then come from /v1/translate with that language.
        const data = await api("/translate", { q: text, source: AUTO, target: target, format: "text" });
        showDetected(data.detectedLanguage);
        source = state.detected;
        if (typeof data.translatedText !== "string") throw new Error("The translation service sent no translation.");
        if (!source || source === target || !(alternatives || attention)) {
          // Nothing to translate (the target's own language, or none told) or nothing more to show.
          render({ hypotheses: [{ text: data.translatedText }], segments: [] }, "", target, false, false);
          source = "";
        }
      }
      if (source) {
        const body = { q: text, source: source, target: target,
                       return_scores: alternatives, return_attention: attention };
        if (alternatives) body.num_hypotheses = NBEST;  // from the same beam: the translation stays the same
        const data = await api("/v1/translate", body);
        const translation = data && Array.isArray(data.translations) ? data.translations[0] : null;
        if (!translation) throw new Error("The translation service sent no translation.");
        render(translation, data.model, target, alternatives, attention);
      }
      done = "Translated in " + Math.round(performance.now() - started) + " ms.";
    } catch (e) {
      el.result.hidden = true;
      showError(e.message);
    } finally {
      setBusy(false);
      el.status.textContent = done;
    }
  }

  function render(translation, model, target, alternatives, attention) {
    const hyps = Array.isArray(translation.hypotheses) ? translation.hypotheses : [];
    const segments = Array.isArray(translation.segments) ? translation.segments : [];
    const best = hyps[0] || { text: "" };
    el.translation.textContent = best.text;
    el.translation.lang = target;
    el.copied.textContent = "";
    if (model) el.model.textContent = "Model: " + model;

    const cut = best.stop_reason === "LENGTH_LIMIT";
    el.warning.hidden = !cut;
    el.warning.textContent = cut ? "The output-length limit stopped the translation: it may be cut short." : "";

    el.hypothesesSection.hidden = !alternatives;
    el.hypotheses.replaceChildren();
    if (alternatives) renderAlternatives(hyps, segments, target);

    el.attentionSection.hidden = !attention;
    el.attentionMaps.replaceChildren();
    if (attention) renderAttention(hyps, segments);

    el.result.hidden = false;
  }

  function hypothesisList(hyps, target) {
    const list = make("ol", { class: "hypotheses" });
    for (const h of hyps) {
      const score = typeof h.score === "number" ? h.score.toFixed(3) : "–";
      const item = make("li", { class: "hypothesis" }, [
        make("span", { class: "hyp-text", lang: target, text: h.text }),
        make("span", { class: "score", title: "log-probability (length-normalised)", text: score }),
      ]);
      if (h.stop_reason === "LENGTH_LIMIT") item.append(make("span", { class: "cut", text: "cut short" }));
      list.append(item);
    }
    return list;
  }

  // One sentence: the text's hypotheses. Several: each sentence's own (the text's i-th
  // hypothesis only joins every sentence's i-th, which says less).
  function renderAlternatives(hyps, segments, target) {
    if (segments.length > 1) {
      segments.forEach((segment, i) => {
        const group = make("div", { class: "segment" }, [
          make("p", { class: "segment-source" }, [make("span", { class: "segment-number", text: "Sentence " + (i + 1) + ": " }),
                                                  make("q", { text: segment.source })]),
          hypothesisList(segment.hypotheses || [], target),
        ]);
        el.hypotheses.append(group);
      });
    } else {
      el.hypotheses.append(hypothesisList(hyps, target));
    }
  }

  function hasAttention(h) {
    return h && Array.isArray(h.attention) && h.attention.length > 0 && Array.isArray(h.source_pieces) &&
      Array.isArray(h.target_pieces);
  }

  // Pieces and attention come once: on the text's hypotheses for a text of one sentence, on
  // each sentence's hypotheses for several.
  function renderAttention(hyps, segments) {
    const maps = [];
    if (hasAttention(hyps[0])) {
      maps.push({ label: segments.length === 1 ? segments[0].source : "", hyp: hyps[0] });
    } else {
      for (const segment of segments) {
        const h = (segment.hypotheses || [])[0];
        if (hasAttention(h)) maps.push({ label: segment.source, hyp: h });
      }
    }
    if (maps.length === 0) {
      el.attentionMaps.append(make("p", { class: "hint", text: "No attention was returned for this text." }));
      return;
    }
    maps.forEach((m, i) => el.attentionMaps.append(attentionTable(m.hyp, m.label, i + 1, maps.length)));
  }

  function shade(w) {
    const v = Math.max(0, Math.min(1, Number(w) || 0));
    // white -> deep blue; lightness 98% .. 28%
    return "hsl(220, 85%, " + (98 - 70 * v).toFixed(1) + "%)";
  }

  function attentionTable(h, label, index, total) {
    const rows = h.target_pieces;
    const cols = h.source_pieces;
    const labelId = "attention-label-" + index;
    const title = make("p", { class: "segment-source", id: labelId }, [
      make("span", { class: "segment-number", text: total > 1 ? "Sentence " + index + ": " : "" }),
      make("q", { text: label || h.text }),
    ]);
    const head = make("tr", {}, [make("th", { scope: "col", class: "corner", text: "target ↓ / source →" })]);
    for (const piece of cols) head.append(make("th", { scope: "col", class: "piece src", text: piece }));
    const body = make("tbody");
    rows.forEach((piece, r) => {
      const row = make("tr", {}, [make("th", { scope: "row", class: "piece tgt", text: piece })]);
      const weights = Array.isArray(h.attention[r]) ? h.attention[r] : [];
      cols.forEach((sourcePiece, c) => {
        const w = Number(weights[c]) || 0;
        const cell = make("td", { class: "cell", title: piece + " ← " + sourcePiece + ": " + w.toFixed(3) }, [
          make("span", { class: "visually-hidden", text: w.toFixed(2) }),
        ]);
        cell.style.backgroundColor = shade(w);
        row.append(cell);
      });
      body.append(row);
    });
    const table = make("table", { class: "attention-grid", "aria-labelledby": labelId,
                                  "data-rows": String(rows.length), "data-cols": String(cols.length) },
                       [make("thead", {}, [head]), body]);
    return make("figure", { class: "attention-map" }, [
      title,
      make("div", { class: "grid-scroll", tabindex: "0", role: "region", "aria-labelledby": labelId }, [table]),
    ]);
  }

  // ---- copying -------------------------------------------------------------------------------

  function copied(message) {
    el.copied.textContent = message;
    clearTimeout(state.copiedTimer);
    state.copiedTimer = setTimeout(() => { el.copied.textContent = ""; }, COPIED_MS);
  }

  // Without the asynchronous clipboard (an insecure origin, a refused permission): the text
  // selected, and the browser's copy command tried; the selection stays for Ctrl+C.
  function copyBySelecting() {
    const range = document.createRange();
    range.selectNodeContents(el.translation);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    copied(ok ? "Copied" : "Selected: press Ctrl+C to copy");
  }

  async function copyTranslation() {
    const text = el.translation.textContent;
    if (!text) return;
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        copied("Copied");
        return;
      } catch (e) {
        // refused: select it instead
      }
    }
    copyBySelecting();
  }

  // ---- files ---------------------------------------------------------------------------------

  // The file section shows once /frontend/settings says files can be translated, and which.
  async function loadFileFormats() {
    try {
      const settings = await api("/frontend/settings");
      if (!settings.filesTranslation || !Array.isArray(settings.supportedFilesFormat)) return;
      el.file.accept = settings.supportedFilesFormat.join(",");
      el.fileFormats.textContent = settings.supportedFilesFormat.join(" ");
      el.fileForm.hidden = false;
    } catch (e) {
      // no file section: the text translation still works
    }
  }

  // LibreTranslate's /translate_file with the chosen languages; the answer's URL becomes a
  // download link named as the gateway names the file (report_de.docx).
  async function translateFile() {
    const file = el.file.files[0];
    clearError();
    el.fileLink.hidden = true;
    if (!file) {
      showError("Choose a file to translate.");
      return;
    }
    const body = new FormData();
    body.append("file", file);
    body.append("source", el.source.value);
    body.append("target", el.target.value);
    el.translateFile.disabled = true;
    el.fileStatus.textContent = "Translating " + file.name + "…";
    try {
      let response;
      try {
        response = await fetch("/translate_file", { method: "POST", body: body });
      } catch (e) {
        throw new Error("Could not reach the translation service (" + (e && e.message ? e.message : e) + ").");
      }
      let data = null;
      try {
        data = await response.json();
      } catch (e) {
        data = null;
      }
      if (!response.ok || !data || typeof data.translatedFileUrl !== "string") {
        const message = data && typeof data.error === "string" ? data.error : response.statusText;
        throw new Error(describeStatus(response.status) + message);
      }
      const name = decodeURIComponent(data.translatedFileUrl.split("/").pop()).replace(/^[0-9a-f]{32}\./, "");
      el.fileLink.href = data.translatedFileUrl;
      el.fileLink.download = name;
      el.fileLink.textContent = "Download " + name;
      el.fileLink.hidden = false;
      el.fileStatus.textContent = "";
    } catch (e) {
      el.fileStatus.textContent = "";
      showError(e.message);
    } finally {
      el.translateFile.disabled = false;
    }
  }

  // ---- wiring --------------------------------------------------------------------------------

  el.form.addEventListener("submit", (event) => {
    event.preventDefault();
    translate();
  });
  el.text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      translate();
    }
  });
  el.text.addEventListener("input", updateCount);
  el.source.addEventListener("change", () => {
    showDetected(null);
    fillTargets(el.target.value);
  });
  el.copy.addEventListener("click", copyTranslation);
  el.fileForm.addEventListener("submit", (event) => {
    event.preventDefault();
    translateFile();
  });
  el.target.addEventListener("change", updateSwap);
  // With "Detect language", the detected language becomes the target (the button waits for one).
  el.swap.addEventListener("click", () => {
    const from = fromLanguage();
    const to = el.target.value;
    if (!from || !state.languages.has(to)) return;
    showDetected(null);
    const shown = el.result.hidden ? "" : el.translation.textContent;
    el.source.value = to;
    fillTargets(from);
    if (shown) {
      el.text.value = shown;
      updateCount();
      el.result.hidden = true;
    }
    el.source.focus();
  });

  updateCount();
  loadLanguages();
  loadLimits();
  loadFileFormats();
})();
