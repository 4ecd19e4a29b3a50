// The local Slack workbench: renders the stand-in's workspace as a reviewer sees it in Slack,
// and acts as the chosen member through the stand-in (which signs and sends what Slack would).
// Plain browser JavaScript, no build step. Routes: bot/standin/workbench.py.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  /** This run's token (in the page's HTML): the stand-in refuses a POST without it. */
  const WORKBENCH_TOKEN = document.querySelector("meta[name=workbench-token]")?.content || "";

  const ui = {
    state: null, // the last /workbench/state answer
    me: null, // the member the page acts as
    channel: null, // the open channel id
    tab: "home", // for the app's channel: "home" or "messages"
    thread: null, // {channel, ts} of the open thread
    poll: null, // AbortController of the running state request
    fresh: true, // the next state request must not wait (the member or a view changed)
    modalKey: null, // "view id:hash" of the modal on screen
    edits: new Map(), // "channel:ts" -> edits seen, to flash messages the bot updated
    seen: new Map(), // channel -> top-level messages seen, for unread marks
    dismissed: new Set(), // ephemerals the member dismissed
    homeAsked: null, // member whose Home tab was last requested
    wantApp: false, // the address asked for the app's channel, whose id the state tells
  };

  // -- DOM helpers ---------------------------------------------------------------------------

  /** Create an element: h("div", {class: "x", onclick: fn, "data-id": 1}, child, "text"). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
      else if (name === "html") el.innerHTML = value;
      else if (value === true) el.setAttribute(name, "");
      else el.setAttribute(name, String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  function escHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
    })[c]);
  }

  const LINK_SCHEMES = ["http:", "https:", "mailto:"];

  /**
   * ``url`` if the page may link to it or open it: http(s) and mailto only, else null. A
   * javascript:, data: or vbscript: link (or any other scheme) in a message could run script
   * in this page, which acts as anyone; such links are shown as plain text. The check parses
   * the URL as the browser will, so what passes is what would be followed.
   */
  function safeUrl(url) {
    if (url === null || url === undefined || url === "") return null;
    try {
      return LINK_SCHEMES.includes(new URL(String(url)).protocol) ? String(url) : null;
    } catch (error) {
      return null; // not an absolute URL
    }
  }

  /** Slack escapes &, < and > in message text; undo that before escaping for HTML. */
  function unslack(text) {
    return String(text).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  // -- people, channels and dates --------------------------------------------------------------

  function userById(id) {
    return (ui.state?.users || []).find((u) => u.id === id);
  }

  function userLabel(id) {
    const user = userById(id);
    return user ? user.name : id;
  }

  function channelLabel(id) {
    const channel = (ui.state?.channels || []).find((c) => c.id === id);
    return channel ? channel.name : id.toLowerCase();
  }

  const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December"];
  const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

  function ordinal(n) {
    const tens = n % 100;
    if (tens >= 11 && tens <= 13) return `${n}th`;
    return n + ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th");
  }

  function clock(date, seconds) {
    const hours = date.getHours() % 12 || 12;
    const minutes = String(date.getMinutes()).padStart(2, "0");
    const secs = seconds ? `:${String(date.getSeconds()).padStart(2, "0")}` : "";
    return `${hours}:${minutes}${secs} ${date.getHours() < 12 ? "AM" : "PM"}`;
  }

  function prettyDay(date) {
    const day = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
    const diff = Math.round((day(date) - day(new Date())) / 86400000);
    return { 0: "today", [-1]: "yesterday", 1: "tomorrow" }[diff] || null;
  }

  function ago(date) {
    const seconds = Math.round((Date.now() - date.getTime()) / 1000);
    const past = seconds >= 0;
    const abs = Math.abs(seconds);
    const [count, unit] = abs < 60 ? [abs, "second"] : abs < 3600 ? [Math.floor(abs / 60), "minute"]
      : abs < 86400 ? [Math.floor(abs / 3600), "hour"] : [Math.floor(abs / 86400), "day"];
    const phrase = `${count} ${unit}${count === 1 ? "" : "s"}`;
    return past ? `${phrase} ago` : `in ${phrase}`;
  }

  /** One token of Slack's <!date^…> formatting. */
  function dateToken(date, token) {
    const month = MONTHS[date.getMonth()];
    const long = `${month} ${ordinal(date.getDate())}, ${date.getFullYear()}`;
    const short = `${month.slice(0, 3)} ${date.getDate()}, ${date.getFullYear()}`;
    const full = `${DAYS[date.getDay()]}, ${long}`;
    switch (token) {
      case "date_num":
        return [date.getFullYear(), date.getMonth() + 1, date.getDate()]
          .map((n) => String(n).padStart(2, "0")).join("-");
      case "date": return long;
      case "date_short": return short;
      case "date_long": return full;
      case "date_pretty": return prettyDay(date) || long;
      case "date_short_pretty": return prettyDay(date) || short;
      case "date_long_pretty": return prettyDay(date) || full;
      case "time": return clock(date, false);
      case "time_secs": return clock(date, true);
      case "ago": return ago(date);
      default: return null;
    }
  }

  function slackDate(target, fallback) {
    const [, epoch, format = "{date}", link] = target.split("^");
    const date = new Date(Number(epoch) * 1000);
    if (!epoch || Number.isNaN(date.getTime())) return escHtml(unslack(fallback || ""));
    const shown = format.replace(/\{(\w+)\}/g, (whole, token) => dateToken(date, token) ?? whole);
    const time = `<time datetime="${date.toISOString()}" title="${escHtml(unslack(fallback || ""))}">`
      + `${escHtml(shown)}</time>`;
    const href = link ? safeUrl(unslack(link)) : null;
    return href ? `<a href="${escHtml(href)}" target="_blank" rel="noopener">${time}</a>` : time;
  }

  // -- mrkdwn ----------------------------------------------------------------------------------

  const EMOJI = {
    white_check_mark: "✅", heavy_check_mark: "✔️", no_entry_sign: "🚫", no_entry: "⛔",
    speech_balloon: "💬", hourglass: "⌛", hourglass_flowing_sand: "⏳", wastebasket: "🗑️",
    bell: "🔔", rotating_light: "🚨", raising_hand: "🙋", arrow_right: "➡️", tada: "🎉",
    repeat: "🔁", warning: "⚠️", x: "❌", eyes: "👀", memo: "📝", robot_face: "🤖",
    "+1": "👍", thumbsup: "👍", "-1": "👎", thumbsdown: "👎", information_source: "ℹ️",
    question: "❓", exclamation: "❗", mag: "🔍", bar_chart: "📊", stopwatch: "⏱️", zap: "⚡",
    fire: "🔥", sparkles: "✨", pencil2: "✏️", link: "🔗", lock: "🔒", calendar: "📅",
    inbox_tray: "📥", outbox_tray: "📤", bust_in_silhouette: "👤", busts_in_silhouette: "👥",
    gear: "⚙️", page_facing_up: "📄", clipboard: "📋", hammer_and_wrench: "🛠️", wave: "👋",
    large_green_circle: "🟢", red_circle: "🔴", large_yellow_circle: "🟡", smile: "😄",
  };

  function emojify(html) {
    return html.replace(/:([a-z0-9_+-]+):/g, (whole, name) =>
      EMOJI[name] ? `<span class="emoji" title=":${name}:">${EMOJI[name]}</span>` : whole);
  }

  /** A <…> control sequence: mention, channel, group, date, special mention or link. */
  function controlSequence(inner) {
    const bar = inner.indexOf("|");
    const target = bar < 0 ? inner : inner.slice(0, bar);
    const label = bar < 0 ? "" : unslack(inner.slice(bar + 1));
    if (target.startsWith("@")) {
      return `<span class="mention">@${escHtml(label || userLabel(target.slice(1)))}</span>`;
    }
    if (target.startsWith("#")) {
      return `<span class="mention">#${escHtml(label || channelLabel(target.slice(1)))}</span>`;
    }
    if (target.startsWith("!subteam^")) {
      const id = target.slice("!subteam^".length);
      const handle = label.replace(/^@/, "") || ui.state?.usergroups?.[id] || id;
      return `<span class="mention">@${escHtml(handle)}</span>`;
    }
    if (target.startsWith("!date^")) return slackDate(target, label);
    if (target.startsWith("!")) {
      return `<span class="mention">@${escHtml(label || target.slice(1).split("^")[0])}</span>`;
    }
    const href = safeUrl(unslack(target));
    if (href) {
      return `<a href="${escHtml(href)}" target="_blank" rel="noopener">`
        + `${escHtml(label || href)}</a>`;
    }
    // Not a link the page may follow (javascript:, data:, an unknown scheme): shown as typed.
    return escHtml(unslack(`<${inner}>`));
  }

  /** One line of mrkdwn: code, control sequences, *bold*, _italic_, ~strike~, :emoji:. */
  function inline(text) {
    const slots = [];
    const keep = (html) => `\u0000${slots.push(html) - 1}\u0000`;
    let out = text
      .replace(/`([^`]+)`/g, (_, code) => keep(`<code>${escHtml(unslack(code))}</code>`))
      .replace(/<([^<>\s][^<>]*)>/g, (_, inner) => keep(controlSequence(inner)));
    out = escHtml(unslack(out))
      .replace(/(^|[^\w*])\*(?!\s)([^*]+?)\*(?!\w)/g, "$1<b>$2</b>")
      .replace(/(^|[^\w_])_(?!\s)([^_]+?)_(?!\w)/g, "$1<i>$2</i>")
      .replace(/(^|[^\w~])~(?!\s)([^~]+?)~(?!\w)/g, "$1<s>$2</s>");
    return emojify(out).replace(/\u0000(\d+)\u0000/g, (_, n) => slots[Number(n)]);
  }

  /** Slack mrkdwn as HTML: lines, > quotes and ``` blocks, then the inline formatting. */
  function mrkdwn(text) {
    const lines = String(text ?? "").split("\n");
    const out = [];
    let plain = [];
    const flush = () => {
      if (plain.length) out.push(`<span class="md-lines">${plain.map(inline).join("<br>")}</span>`);
      plain = [];
    };
    for (let i = 0; i < lines.length; i += 1) {
      const line = lines[i];
      if (line.startsWith("```")) {
        const rest = [line.slice(3), ...lines.slice(i + 1)].join("\n");
        const end = rest.indexOf("```");
        if (end >= 0) {
          flush();
          out.push(`<pre class="md-pre">${escHtml(unslack(rest.slice(0, end)))}</pre>`);
          const consumed = rest.slice(0, end + 3).split("\n").length - 1;
          const after = rest.slice(end + 3).split("\n")[0];
          i += consumed;
          if (after.trim()) plain.push(after);
          continue;
        }
      }
      if (line.startsWith(">")) {
        flush();
        const quoted = [];
        while (i < lines.length && lines[i].startsWith(">")) {
          quoted.push(inline(lines[i].slice(1).replace(/^ /, "")));
          i += 1;
        }
        i -= 1;
        out.push(`<blockquote class="md-quote">${quoted.join("<br>")}</blockquote>`);
        continue;
      }
      plain.push(line);
    }
    flush();
    return out.join("");
  }

  /** A Block Kit text object as a node: mrkdwn formatted, plain_text escaped. */
  function textNode(obj, cls) {
    if (!obj) return null;
    if (typeof obj === "string") return h("span", { class: cls }, obj);
    const html = obj.type === "mrkdwn" ? mrkdwn(obj.text)
      : (obj.emoji === false ? escHtml(obj.text ?? "") : emojify(escHtml(obj.text ?? "")));
    return h("span", { class: `${cls || ""} ${obj.type === "mrkdwn" ? "mrkdwn" : "plain"}`, html });
  }

  function plainText(obj) {
    return obj ? String(obj.text ?? "") : "";
  }

  // -- Block Kit -------------------------------------------------------------------------------

  /** A visible stand-in for a block or element the workbench cannot show: never drop one. */
  function unsupported(obj, what) {
    return h("div", { class: "b-unsupported", "data-unsupported": obj?.type || "?" },
      h("div", { class: "b-unsupported-title" },
        `Unsupported ${what}: ${obj?.type || "(no type)"}`,
        h("span", { class: "muted" }, " — shown as JSON; Slack may render it")),
      h("pre", {}, JSON.stringify(obj, null, 2)));
  }

  /** Blocks of a message, ephemeral, modal or Home; ``ctx`` says where clicks go. */
  function renderBlocks(blocks, ctx) {
    const frag = h("div", { class: "blocks" });
    for (const block of blocks || []) {
      let node;
      try {
        node = renderBlock(block, ctx);
      } catch (error) {
        console.error("cannot render block", block, error);
        node = unsupported(block, "block (it failed to render)");
      }
      frag.append(node);
    }
    return frag;
  }

  function renderBlock(block, ctx) {
    const attrs = { "data-block-id": block.block_id, "data-block-type": block.type };
    switch (block.type) {
      case "header":
        return h("div", { ...attrs, class: "b-header" }, textNode(block.text));
      case "divider":
        return h("hr", { ...attrs, class: "b-divider" });
      case "section": {
        const body = h("div", { class: "b-section-body" });
        if (block.text) body.append(textNode(block.text, "b-text"));
        if (block.fields?.length) {
          body.append(h("div", { class: "b-fields" },
            block.fields.map((field) => h("div", { class: "b-field" }, textNode(field)))));
        }
        const node = h("div", { ...attrs, class: "b-section" }, body);
        if (block.accessory) {
          node.append(h("div", { class: "b-accessory" }, renderElement(block.accessory, block, ctx)));
        }
        return node;
      }
      case "context":
        return h("div", { ...attrs, class: "b-context" }, (block.elements || []).map((e) =>
          e.type === "image"
            ? h("img", { class: "b-context-img", src: e.image_url, alt: e.alt_text, title: e.alt_text })
            : (e.type === "mrkdwn" || e.type === "plain_text") ? textNode(e) : unsupported(e, "element")));
      case "actions":
        return h("div", { ...attrs, class: "b-actions" },
          (block.elements || []).map((e) => renderElement(e, block, ctx)));
      case "image":
        return h("figure", { ...attrs, class: "b-image" },
          block.title ? h("figcaption", {}, plainText(block.title)) : null,
          h("img", { src: block.image_url || block.slack_file?.url, alt: block.alt_text, title: block.alt_text }));
      case "input":
        if (ctx.surface === "modal") return renderInput(block, ctx);
        return unsupported(block, "block outside a modal");
      case "rich_text":
        return h("div", { ...attrs, class: "b-rich" }, (block.elements || []).map(richPart));
      default:
        return unsupported(block, "block");
    }
  }

  // rich_text: what Slack attaches to the messages people type.

  function richPart(part) {
    const inlineOf = (p) => (p.elements || []).map(richInline);
    switch (part.type) {
      case "rich_text_section": return h("div", { class: "rt-section" }, inlineOf(part));
      case "rich_text_quote": return h("blockquote", { class: "md-quote" }, inlineOf(part));
      case "rich_text_preformatted": return h("pre", { class: "md-pre" }, inlineOf(part));
      case "rich_text_list":
        return h(part.style === "ordered" ? "ol" : "ul", { class: "rt-list" },
          (part.elements || []).map((item) => h("li", {}, inlineOf(item))));
      default: return unsupported(part, "rich text part");
    }
  }

  function richInline(e) {
    const style = e.style || {};
    const cls = ["rt", style.bold && "b", style.italic && "i", style.strike && "s", style.code && "code"]
      .filter(Boolean).join(" ");
    switch (e.type) {
      case "text": return h("span", { class: cls }, e.text);
      case "link": {
        const href = safeUrl(e.url);
        if (!href) return h("span", { class: cls }, e.text || e.url); // refused: plain text
        return h("a", { class: cls, href, target: "_blank", rel: "noopener" }, e.text || e.url);
      }
      case "user": return h("span", { class: "mention" }, `@${userLabel(e.user_id)}`);
      case "channel": return h("span", { class: "mention" }, `#${channelLabel(e.channel_id)}`);
      case "usergroup":
        return h("span", { class: "mention" }, `@${ui.state?.usergroups?.[e.usergroup_id] || e.usergroup_id}`);
      case "broadcast": return h("span", { class: "mention" }, `@${e.range}`);
      case "emoji": return h("span", { class: "emoji", title: `:${e.name}:` }, EMOJI[e.name] || `:${e.name}:`);
      case "date": return h("span", { class: cls, html: slackDate(`!date^${e.timestamp}^${e.format}`, e.fallback) });
      default: return unsupported(e, "rich text element");
    }
  }

  // Interactive elements outside input blocks: each use is a block_actions payload.

  function renderElement(element, block, ctx) {
    const attrs = { "data-action-id": element.action_id };
    switch (element.type) {
      case "button": {
        const style = element.style ? ` ${element.style}` : "";
        return h("button", {
          ...attrs, type: "button", class: `sk-btn${style}`,
          onclick: (event) => {
            const button = event.currentTarget;
            confirmThen(element.confirm, () => {
              const url = safeUrl(element.url); // a javascript: url is never opened
              if (url) window.open(url, "_blank", "noopener");
              return act(ctx, block, element, undefined, button);
            });
          },
        }, plainText(element.text));
      }
      case "image":
        return h("img", { class: "b-accessory-img", src: element.image_url, alt: element.alt_text, title: element.alt_text });
      case "static_select": case "external_select": case "users_select":
      case "conversations_select": case "channels_select": case "overflow": {
        const select = selectControl(element, false);
        select.classList.add(element.type === "overflow" ? "overflow" : "sk-select");
        select.setAttribute("data-action-id", element.action_id);
        select.addEventListener("change", () => {
          const picked = select.value;
          confirmThen(element.confirm, () => act(ctx, block, element, picked, select));
        });
        return select;
      }
      case "radio_buttons": case "checkboxes": {
        const group = choiceControl(element, `${block.block_id}:${element.action_id}`);
        group.setAttribute("data-action-id", element.action_id);
        group.addEventListener("change", () => {
          const picked = readChoices(group, element.type === "checkboxes");
          act(ctx, block, element, picked, group);
        });
        return group;
      }
      case "datepicker": case "timepicker": {
        const input = dateControl(element);
        input.setAttribute("data-action-id", element.action_id);
        input.addEventListener("change", () => act(ctx, block, element, input.value, input));
        return input;
      }
      default:
        return unsupported(element, "element");
    }
  }

  function optionNode(option, selected) {
    return h("option", { value: option.value, selected }, plainText(option.text));
  }

  /** A <select> for static, user and channel selects (and overflow menus). */
  function selectControl(element, multiple) {
    const initial = new Set([
      element.initial_option?.value, ...(element.initial_options || []).map((o) => o.value),
      element.initial_user, ...(element.initial_users || []),
      element.initial_conversation, element.initial_channel,
      ...(element.initial_conversations || []), ...(element.initial_channels || []),
    ].filter(Boolean));
    const select = h("select", { multiple });
    if (!multiple) {
      const label = element.type === "overflow" ? "⋯" : plainText(element.placeholder) || "Select an item";
      select.append(h("option", { value: "", selected: initial.size === 0, disabled: element.type === "overflow" }, label));
    }
    const kind = element.type.replace(/^multi_/, "");
    let options;
    if (kind === "users_select") {
      options = (ui.state?.users || []).filter((u) => !u.is_bot)
        .map((u) => ({ value: u.id, text: { text: `${u.real_name} (@${u.name})` } }));
    } else if (kind === "conversations_select" || kind === "channels_select") {
      options = (ui.state?.channels || []).filter((c) => c.kind === "channel")
        .map((c) => ({ value: c.id, text: { text: `#${c.name}` } }));
    } else {
      options = element.options || [];
    }
    for (const option of options) select.append(optionNode(option, initial.has(option.value)));
    for (const group of element.option_groups || []) {
      select.append(h("optgroup", { label: plainText(group.label) },
        (group.options || []).map((o) => optionNode(o, initial.has(o.value)))));
    }
    return select;
  }

  function choiceControl(element, name) {
    const initial = new Set([element.initial_option?.value,
      ...(element.initial_options || []).map((o) => o.value)].filter(Boolean));
    const type = element.type === "checkboxes" ? "checkbox" : "radio";
    return h("div", { class: `b-choices ${type}` }, (element.options || []).map((option) =>
      h("label", { class: "b-choice" },
        h("input", { type, name, value: option.value, checked: initial.has(option.value) }),
        h("span", {}, textNode(option.text),
          option.description ? h("span", { class: "b-choice-description" }, textNode(option.description)) : null))));
  }

  function readChoices(group, many) {
    const picked = [...group.querySelectorAll("input:checked")].map((input) => input.value);
    return many ? picked : (picked[0] ?? null);
  }

  function dateControl(element) {
    if (element.type === "timepicker") {
      return h("input", { type: "time", class: "sk-input", value: element.initial_time || "" });
    }
    return h("input", { type: "date", class: "sk-input", value: element.initial_date || "" });
  }

  // Input blocks: what a modal submits (view_submission) rather than sends on use.

  const TEXT_INPUTS = {
    plain_text_input: "text", email_text_input: "email", url_text_input: "url", number_input: "number",
  };

  function renderInput(block, ctx) {
    const element = block.element || {};
    const id = `input-${block.block_id}`;
    let control;
    if (element.type in TEXT_INPUTS) {
      const common = {
        id, class: "sk-input", placeholder: plainText(element.placeholder) || null,
        "data-role": "value",
      };
      if (element.type === "plain_text_input" && element.multiline) {
        control = h("textarea", { ...common, rows: 4 }, element.initial_value || "");
      } else {
        control = h("input", {
          ...common, type: TEXT_INPUTS[element.type], value: element.initial_value ?? "",
          step: element.type === "number_input" ? (element.is_decimal_allowed ? "any" : "1") : null,
          min: element.min_value ?? null, max: element.max_value ?? null,
        });
      }
    } else if (/^(multi_)?(static|users|conversations|channels)_select$/.test(element.type)) {
      control = selectControl(element, element.type.startsWith("multi_"));
      control.id = id;
      control.classList.add("sk-select");
    } else if (element.type === "checkboxes" || element.type === "radio_buttons") {
      control = choiceControl(element, id);
    } else if (element.type === "datepicker" || element.type === "timepicker") {
      control = dateControl(element);
      control.id = id;
    } else if (element.type === "datetimepicker") {
      const initial = element.initial_date_time
        ? new Date(element.initial_date_time * 1000 - new Date().getTimezoneOffset() * 60000)
          .toISOString().slice(0, 16) : "";
      control = h("input", { id, type: "datetime-local", class: "sk-input", value: initial });
    } else {
      control = unsupported(element, "input element");
    }
    return h("div", {
      class: "b-input", "data-block-id": block.block_id, "data-block-type": "input",
      "data-action-id": element.action_id, "data-element-type": element.type,
      "data-optional": block.optional ? "true" : "false",
    },
    h("label", { class: "b-label", for: id }, plainText(block.label),
      block.optional ? h("span", { class: "muted" }, " (optional)") : null),
    control,
    block.hint ? h("div", { class: "b-hint" }, textNode(block.hint)) : null,
    h("div", { class: "b-error", role: "alert", hidden: true }));
  }

  /** What the person entered in an input block, as SlackStandIn.submit_view takes it. */
  function inputValue(wrap) {
    const type = wrap.dataset.elementType;
    if (type in TEXT_INPUTS) return wrap.querySelector(".sk-input").value;
    if (type === "checkboxes") return readChoices(wrap, true);
    if (type === "radio_buttons") return readChoices(wrap, false);
    if (type === "datetimepicker") {
      const value = wrap.querySelector("input").value;
      return value ? Math.round(new Date(value).getTime() / 1000) : null;
    }
    const select = wrap.querySelector("select");
    if (select) {
      return select.multiple ? [...select.selectedOptions].map((o) => o.value) : (select.value || null);
    }
    const input = wrap.querySelector("input");
    return input ? (input.value || null) : null;
  }

  /** What Slack's own client refuses before sending anything (its wording). */
  function clientError(wrap, element, value) {
    const empty = value === null || value === "" || (Array.isArray(value) && !value.length);
    if (empty) return wrap.dataset.optional === "true" ? null : "Please complete this required field.";
    if (element.type === "plain_text_input") {
      if (element.min_length && value.length < element.min_length) {
        return `Must have at least ${element.min_length} characters`;
      }
      if (value.length > (element.max_length || 3000)) {
        return `Must have at most ${element.max_length || 3000} characters`;
      }
    }
    if (element.type === "number_input") {
      const number = Number(value);
      if (value.trim() === "" || Number.isNaN(number)) return "Please enter a number.";
      if (!element.is_decimal_allowed && !Number.isInteger(number)) return "Please enter a whole number.";
      if (element.min_value !== undefined && number < Number(element.min_value)) {
        return `Please enter a number that is at least ${element.min_value}.`;
      }
      if (element.max_value !== undefined && number > Number(element.max_value)) {
        return `Please enter a number that is at most ${element.max_value}.`;
      }
    }
    return null;
  }

  // -- talking to the stand-in -----------------------------------------------------------------

  function toast(text, kind = "error") {
    const node = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
    $("toasts").append(node);
    setTimeout(() => node.remove(), 7000);
  }

  /** POST an action; the answer says how the bot answered. Errors become a toast. */
  async function send(route, body, busy) {
    busy?.classList.add("busy");
    try {
      const response = await fetch(`/workbench/${route}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Workbench-Token": WORKBENCH_TOKEN },
        body: JSON.stringify(body),
      });
      const answer = await response.json().catch(() => ({ ok: false, error: `HTTP ${response.status}` }));
      if (!answer.ok) toast(answer.error || "The app did not accept that.");
      return answer;
    } catch (error) {
      toast(`The stand-in is not answering (${error.message}). Is handoff dev still running?`);
      return { ok: false };
    } finally {
      busy?.classList.remove("busy");
      refresh();
    }
  }

  function act(ctx, block, element, selected, busy) {
    const body = { user: ui.me, action_id: element.action_id, block_id: block.block_id, ...ctx.target };
    if (selected !== undefined) body.selected_option = selected;
    return send("click", body, busy);
  }

  /** Run ``then`` now, or once the person confirms Slack's confirmation dialog. */
  function confirmThen(confirm, then) {
    if (!confirm) return then();
    const overlay = $("confirm-overlay");
    const dialog = $("confirm");
    const close = () => { overlay.hidden = true; dialog.replaceChildren(); };
    const style = confirm.style === "danger" ? "danger" : "primary";
    dialog.replaceChildren(
      h("h2", { class: "confirm-title" }, plainText(confirm.title) || "Are you sure?"),
      h("div", { class: "confirm-text" }, textNode(confirm.text)),
      h("div", { class: "confirm-buttons" },
        h("button", { type: "button", class: "sk-btn", "data-role": "deny", onclick: close },
          plainText(confirm.deny) || "Cancel"),
        h("button", {
          type: "button", class: `sk-btn ${style}`, "data-role": "confirm",
          onclick: () => { close(); then(); },
        }, plainText(confirm.confirm) || "Yes")));
    overlay.hidden = false;
    dialog.querySelector("[data-role=confirm]").focus();
    return undefined;
  }

  // -- live state ------------------------------------------------------------------------------

  /** Ask for the state now instead of waiting for the next change. */
  function refresh() {
    ui.fresh = true;
    ui.poll?.abort();
  }

  function setStatus(state, text) {
    const status = $("status");
    status.dataset.state = state;
    status.textContent = text;
  }

  async function pollForever() {
    for (;;) {
      const asked = ui.me;
      const params = new URLSearchParams();
      if (asked) params.set("user", asked);
      if (!ui.fresh && ui.state) params.set("since", ui.state.version);
      ui.fresh = false;
      ui.poll = new AbortController();
      try {
        const response = await fetch(`/workbench/state?${params}`, { signal: ui.poll.signal, cache: "no-store" });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        const state = await response.json();
        setStatus("live", "● live");
        if (asked === ui.me || !ui.me) apply(state);
      } catch (error) {
        if (error.name === "AbortError") continue;
        setStatus("offline", "○ stand-in not answering; retrying");
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
  }

  function apply(state) {
    ui.state = state;
    ui.me = state.me;
    if (ui.wantApp) {
      // The address names the app's channel "app"; its id comes with the first state.
      ui.channel = state.dm;
      ui.wantApp = false;
    }
    const channels = state.channels || [];
    if (!channels.some((c) => c.id === ui.channel)) {
      const first = channels.find((c) => c.kind === "channel" && state.messages.some((m) => m.channel === c.id));
      ui.channel = (first || channels[0] || {}).id || null;
    }
    if (ui.thread && !state.messages.some((m) => m.channel === ui.thread.channel && m.ts === ui.thread.ts)) {
      ui.thread = null;
    }
    remember();
    render();
  }

  /** Keep the member, channel and tab in the address, so a reload (or a test) lands there. */
  function remember() {
    const url = new URL(window.location.href);
    if (ui.me) url.searchParams.set("user", ui.me);
    url.hash = ui.channel ? (isApp(ui.channel) ? `app/${ui.tab}` : ui.channel) : "";
    window.history.replaceState(null, "", url);
  }

  function isApp(channelId) {
    return channelId && channelId === ui.state?.dm;
  }

  // -- rendering the page ----------------------------------------------------------------------

  function render() {
    $("team-name").textContent = ui.state.team.domain;
    renderSwitcher();
    renderSidebar();
    renderMain();
    renderThread();
    renderModal();
  }

  function renderSwitcher() {
    const select = $("user-switcher");
    const members = ui.state.users.filter((u) => !u.is_bot);
    const wanted = members.map((u) => `${u.id}:${u.role}`).join(",");
    if (select.dataset.members !== wanted) {
      select.replaceChildren(...members.map((u) => h("option", { value: u.id },
        `${u.real_name === u.name ? "" : `${u.real_name} `}@${u.name} · ${u.role}`)));
      select.dataset.members = wanted;
    }
    select.value = ui.me;
  }

  function topLevel(channel) {
    return ui.state.messages.filter((m) => m.channel === channel && (!m.thread_ts || m.thread_ts === m.ts));
  }

  function renderSidebar() {
    const item = (channel, label) => {
      const count = topLevel(channel.id).length;
      const seen = ui.seen.get(channel.id) ?? count;
      if (!ui.seen.has(channel.id)) ui.seen.set(channel.id, count);
      const unread = channel.id !== ui.channel && count > seen;
      return h("button", {
        type: "button", class: `side-item${channel.id === ui.channel ? " active" : ""}${unread ? " unread" : ""}`,
        "data-channel": channel.id, onclick: () => openChannel(channel.id),
      }, label, unread ? h("span", { class: "badge" }, String(count - seen)) : null);
    };
    const channels = ui.state.channels.filter((c) => c.kind === "channel");
    const app = ui.state.channels.find((c) => c.kind === "app");
    $("sidebar").replaceChildren(
      h("div", { class: "side-heading" }, "Channels"),
      ...channels.map((c) => item(c, `# ${c.name}`)),
      h("div", { class: "side-heading" }, "Apps"),
      app ? item(app, `● ${app.name}`) : null,
      h("div", { class: "side-help" },
        "Everything you do here reaches the bot as Slack would send it: signed, same payloads."));
  }

  function openChannel(channelId) {
    if (ui.channel !== channelId) ui.thread = null;
    ui.channel = channelId;
    if (isApp(channelId) && ui.tab === "home") askHome();
    remember();
    render();
  }

  function openTab(tab) {
    ui.tab = tab;
    if (tab === "home") askHome();
    remember();
    render();
  }

  /** Slack sends app_home_opened each time the tab is opened; the bot then publishes it. */
  function askHome() {
    ui.homeAsked = ui.me;
    send("home", { user: ui.me });
  }

  function renderMain() {
    const app = isApp(ui.channel);
    const channel = ui.state.channels.find((c) => c.id === ui.channel);
    const onHome = app && ui.tab === "home";
    const title = channel
      ? [h("strong", {}, app ? channel.name : `# ${channel.name}`),
        app ? h("span", { class: "app-badge" }, "APP") : ""]
      : [h("span", { class: "muted" }, "No channels yet")];
    $("channel-header").replaceChildren(...title);
    $("tabs").hidden = !app;
    for (const tab of $("tabs").querySelectorAll("[data-tab]")) {
      tab.classList.toggle("active", tab.dataset.tab === ui.tab);
      tab.setAttribute("aria-selected", String(tab.dataset.tab === ui.tab));
    }
    $("messages").hidden = onHome;
    $("composer").hidden = onHome || !channel;
    $("home").hidden = !onHome;
    const input = $("composer-input");
    input.placeholder = channel
      ? `Message ${app ? channel.name : `#${channel.name}`}  ·  slash commands too, e.g. /handoff list`
      : "";
    if (onHome) renderHome();
    else if (channel) renderMessages();
    else $("messages").replaceChildren();
  }

  function renderHome() {
    const home = ui.state.home;
    const box = $("home");
    if (ui.homeAsked !== ui.me) askHome();
    if (!home) {
      box.replaceChildren(h("div", { class: "empty" }, "The app has not published a Home tab for you yet…"));
      return;
    }
    box.replaceChildren(h("div", { class: "home-view", "data-view-id": home.id },
      renderBlocks(home.blocks, { surface: "home", target: { view: { id: home.id } } })));
  }

  /** Messages and this member's ephemerals, in time order. */
  function timeline(channel, threadTs) {
    const messages = threadTs
      ? ui.state.messages.filter((m) => m.channel === channel && m.thread_ts === threadTs && m.ts !== threadTs)
      : topLevel(channel);
    const ephemerals = ui.state.ephemerals.filter((e) => e.channel === channel
      && (e.thread_ts || null) === (threadTs || null) && !ui.dismissed.has(e.ts));
    return [...messages.map((m) => ({ kind: "message", item: m })),
      ...ephemerals.map((e) => ({ kind: "ephemeral", item: e }))]
      .sort((a, b) => Number(a.item.ts) - Number(b.item.ts));
  }

  function keepScroll(box, fill) {
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 60;
    const before = box.scrollTop;
    const sameView = box.dataset.view === fill.view;
    fill.build();
    box.dataset.view = fill.view;
    box.scrollTop = atBottom || !sameView ? box.scrollHeight : before;
  }

  function renderMessages() {
    const box = $("messages");
    ui.seen.set(ui.channel, topLevel(ui.channel).length);
    keepScroll(box, {
      view: `${ui.me}:${ui.channel}`,
      build: () => {
        const items = timeline(ui.channel, null);
        box.replaceChildren(...(items.length ? items.map(({ kind, item }) =>
          (kind === "message" ? messageNode(item, false) : ephemeralNode(item)))
          : [h("div", { class: "empty" }, "No messages yet. The bot posts handoffs here.")]));
      },
    });
  }

  function renderThread() {
    const panel = $("thread");
    const parent = ui.thread && ui.state.messages.find((m) => m.channel === ui.thread.channel && m.ts === ui.thread.ts);
    panel.hidden = !parent;
    document.body.classList.toggle("with-thread", Boolean(parent));
    if (!parent) return;
    $("thread-channel").textContent = isApp(parent.channel) ? "" : `# ${channelLabel(parent.channel)}`;
    const box = $("thread-messages");
    keepScroll(box, {
      view: `${ui.me}:${parent.channel}:${parent.ts}`,
      build: () => {
        const items = timeline(parent.channel, parent.ts);
        box.replaceChildren(messageNode(parent, true),
          h("div", { class: "thread-count" }, `${parent.reply_count} ${parent.reply_count === 1 ? "reply" : "replies"}`),
          ...items.map(({ kind, item }) => (kind === "message" ? messageNode(item, true) : ephemeralNode(item))));
      },
    });
  }

  function avatar(userId, isBot) {
    const name = isBot ? ui.state.bot.name : userLabel(userId);
    let hue = 0;
    for (const c of name) hue = (hue * 31 + c.charCodeAt(0)) % 360;
    return h("div", { class: `avatar${isBot ? " bot" : ""}`, style: `--hue:${hue}`, "aria-hidden": "true" },
      isBot ? "🤖" : name.slice(0, 1).toUpperCase());
  }

  function timeOf(ts) {
    const date = new Date(Number(ts) * 1000);
    return h("span", { class: "msg-time", title: date.toString() }, clock(date, false));
  }

  /** Flash a message the bot just posted or updated, so a live change is easy to see. */
  function changed(key, edits) {
    const before = ui.edits.get(key);
    ui.edits.set(key, edits);
    return before !== undefined && before !== edits;
  }

  function messageNode(message, inThread) {
    const user = userById(message.user);
    const key = `${message.channel}:${message.ts}`;
    const author = message.is_bot ? ui.state.bot.name : (user ? user.real_name : message.user);
    const target = { message: { channel: message.channel, ts: message.ts } };
    const body = message.blocks?.length
      ? renderBlocks(message.blocks, { surface: "message", target })
      : h("div", { class: "msg-text", html: mrkdwn(message.text) });
    const isParent = !message.thread_ts || message.thread_ts === message.ts;
    return h("div", {
      class: `msg${changed(key, message.edits) ? " updated" : ""}`, "data-ts": message.ts,
      "data-channel": message.channel, "data-user": message.user,
    },
    avatar(message.user, message.is_bot),
    h("div", { class: "msg-body" },
      h("div", { class: "msg-meta" }, h("span", { class: "msg-author" }, author),
        message.is_bot ? h("span", { class: "app-badge" }, "APP") : null, timeOf(message.ts),
        message.edits ? h("span", { class: "muted edited" }, "(edited)") : null),
      body,
      !inThread && isParent && message.reply_count
        ? h("button", {
          type: "button", class: "replies-link", onclick: () => openThread(message),
        }, `${message.reply_count} ${message.reply_count === 1 ? "reply" : "replies"}`)
        : null),
    !inThread && isParent
      ? h("div", { class: "msg-toolbar" }, h("button", {
        type: "button", class: "sk-btn small", "data-role": "reply", onclick: () => openThread(message),
      }, "Reply in thread"))
      : null);
  }

  function ephemeralNode(ephemeral) {
    const target = { ephemeral: { ts: ephemeral.ts } };
    const body = ephemeral.blocks?.length
      ? renderBlocks(ephemeral.blocks, { surface: "message", target })
      : h("div", { class: "msg-text", html: mrkdwn(ephemeral.text) });
    return h("div", { class: "msg ephemeral", "data-ts": ephemeral.ts, "data-ephemeral": "true" },
      avatar(null, true),
      h("div", { class: "msg-body" },
        h("div", { class: "msg-meta" }, h("span", { class: "msg-author" }, ui.state.bot.name),
          h("span", { class: "app-badge" }, "APP"), timeOf(ephemeral.ts)),
        body,
        h("div", { class: "ephemeral-note" }, "👁 Only visible to you · ",
          h("button", {
            type: "button", class: "link-btn",
            onclick: () => { ui.dismissed.add(ephemeral.ts); render(); },
          }, "Dismiss"))));
  }

  function openThread(message) {
    ui.thread = { channel: message.channel, ts: message.ts };
    render();
    $("thread-input").focus();
  }

  // -- modals ----------------------------------------------------------------------------------

  function modalValues() {
    const kept = new Map();
    for (const wrap of $("modal").querySelectorAll(".b-input")) {
      kept.set(`${wrap.dataset.blockId}/${wrap.dataset.actionId}`, inputValue(wrap));
    }
    return kept;
  }

  function restoreValue(wrap, value) {
    if (value === null || value === undefined) return;
    const type = wrap.dataset.elementType;
    if (type === "checkboxes" || type === "radio_buttons") {
      const picked = new Set([value].flat());
      for (const input of wrap.querySelectorAll("input")) input.checked = picked.has(input.value);
    } else if (wrap.querySelector("select")) {
      const picked = new Set([value].flat());
      for (const option of wrap.querySelector("select").options) option.selected = picked.has(option.value);
    } else if (type !== "datetimepicker") {
      const field = wrap.querySelector("input, textarea");
      if (field) field.value = value;
    }
  }

  function renderModal() {
    const overlay = $("modal-overlay");
    const modals = ui.state.modals || [];
    const top = modals[modals.length - 1];
    if (!top) {
      overlay.hidden = true;
      ui.modalKey = null;
      $("modal").replaceChildren();
      return;
    }
    const key = `${ui.me}:${top.id}:${top.hash}`;
    if (key !== ui.modalKey) {
      // Slack keeps what was typed when a view is updated with the same block and action ids.
      const kept = ui.modalKey?.startsWith(`${ui.me}:${top.id}:`) ? modalValues() : null;
      buildModal(top, modals.length);
      if (kept) {
        for (const wrap of $("modal").querySelectorAll(".b-input")) {
          restoreValue(wrap, kept.get(`${wrap.dataset.blockId}/${wrap.dataset.actionId}`));
        }
      }
      ui.modalKey = key;
      overlay.hidden = false;
      $("modal").querySelector("input, textarea, select")?.focus();
    }
    showModalErrors(top.errors || {}, top.submission_error);
  }

  function buildModal(view, depth) {
    const close = () => send("close", { user: ui.me, view_id: view.id });
    $("modal").setAttribute("data-view-id", view.id);
    $("modal").setAttribute("data-callback-id", view.callback_id || "");
    $("modal").replaceChildren(
      h("div", { class: "modal-header" },
        depth > 1 ? h("span", { class: "muted" }, `${depth - 1} ‹ `) : null,
        h("h2", { class: "modal-title", id: "modal-title" }, plainText(view.title)),
        h("button", { type: "button", class: "icon-btn", "aria-label": "Close", onclick: close }, "×")),
      h("div", { class: "modal-banner", role: "alert", hidden: true }),
      h("form", {
        class: "modal-body", id: "modal-form", novalidate: true,
        onsubmit: (event) => { event.preventDefault(); submitModal(view); },
      }, renderBlocks(view.blocks, { surface: "modal", target: { view: { id: view.id } } })),
      h("div", { class: "modal-footer" },
        h("button", { type: "button", class: "sk-btn", "data-role": "close", onclick: close },
          plainText(view.close) || "Cancel"),
        view.submit
          ? h("button", { type: "submit", form: "modal-form", class: "sk-btn primary", "data-role": "submit" },
            plainText(view.submit))
          : null));
    $("modal").setAttribute("aria-labelledby", "modal-title");
  }

  function showError(wrap, text) {
    const error = wrap.querySelector(".b-error");
    error.textContent = text || "";
    error.hidden = !text;
    wrap.classList.toggle("has-error", Boolean(text));
  }

  function showModalErrors(errors, submissionError) {
    for (const wrap of $("modal").querySelectorAll(".b-input")) {
      if (wrap.dataset.clientError) continue;
      showError(wrap, errors[wrap.dataset.blockId]);
    }
    const banner = $("modal").querySelector(".modal-banner");
    if (banner) {
      banner.hidden = !submissionError;
      banner.textContent = submissionError
        ? `We had some trouble connecting. Try again? (${submissionError})` : "";
    }
  }

  async function submitModal(view) {
    const values = {};
    let refused = false;
    for (const wrap of $("modal").querySelectorAll(".b-input")) {
      const block = view.blocks.find((b) => b.block_id === wrap.dataset.blockId);
      const value = inputValue(wrap);
      const error = clientError(wrap, block.element, value);
      delete wrap.dataset.clientError;
      showError(wrap, error);
      if (error) {
        wrap.dataset.clientError = "true";
        refused = true;
      }
      const empty = value === null || value === "" || (Array.isArray(value) && !value.length);
      if (!empty) values[wrap.dataset.blockId] = { [wrap.dataset.actionId]: value };
    }
    if (refused) return;
    const button = $("modal").querySelector("[data-role=submit]");
    if (button) button.disabled = true;
    const answer = await send("submit", { user: ui.me, view_id: view.id, values }, button);
    if (button) button.disabled = false;
    if (answer.errors) showModalErrors(answer.errors, answer.submission_error);
  }

  // -- composing -------------------------------------------------------------------------------

  function composer(form, input, threadTs) {
    const submit = async () => {
      const text = input.value.trim();
      if (!text) return;
      const channel = threadTs() ? ui.thread.channel : ui.channel;
      const body = { user: ui.me, channel, text };
      if (threadTs()) body.thread_ts = threadTs();
      input.value = "";
      const answer = await send("message", body, form);
      if (!answer.ok && !input.value) input.value = text;
    };
    form.addEventListener("submit", (event) => { event.preventDefault(); submit(); });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        submit();
      }
    });
  }

  // -- start -----------------------------------------------------------------------------------

  function start() {
    const url = new URL(window.location.href);
    ui.me = url.searchParams.get("user");
    const hash = decodeURIComponent(url.hash.slice(1));
    if (hash.startsWith("app/")) {
      ui.tab = hash.slice(4) === "messages" ? "messages" : "home";
      ui.wantApp = true;
    } else if (hash) {
      ui.channel = hash;
    }
    $("user-switcher").addEventListener("change", (event) => {
      ui.me = event.target.value;
      ui.thread = null;
      ui.modalKey = null;
      ui.homeAsked = null;
      refresh(); // the next state is the new member's; until it comes, the old one stays up
    });
    for (const tab of $("tabs").querySelectorAll("[data-tab]")) {
      tab.addEventListener("click", () => openTab(tab.dataset.tab));
    }
    $("thread-close").addEventListener("click", () => { ui.thread = null; render(); });
    composer($("composer"), $("composer-input"), () => null);
    composer($("thread-composer"), $("thread-input"), () => ui.thread?.ts);
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !$("confirm-overlay").hidden) {
        $("confirm-overlay").hidden = true;
      }
    });
    pollForever();
  }

  start();
})();
