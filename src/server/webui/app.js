// The web page of `ignis serve`: a chat over /v1/chat/completions and a
// dashboard over /v1/status. Plain DOM code, no dependencies. Model output
// is untrusted: it only ever reaches the page as text nodes (see md()).
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const K = { convs: 'ignis.conversations', cur: 'ignis.current', settings: 'ignis.settings',
              key: 'ignis.apiKey', system: 'ignis.system' };
  const load = (k, d) => {
    try { const v = localStorage.getItem(k); return v === null ? d : JSON.parse(v); } catch (e) { return d; }
  };
  const save = (k, v) => { try { localStorage.setItem(k, JSON.stringify(v)); return true; } catch (e) { return false; } };
  const str = (v) => (typeof v === 'string' ? v : '');

  // ---- stored state ---------------------------------------------------------
  const ROLES = ['user', 'assistant', 'system'];
  const MAX_IMAGES = 16; // per request, as the server allows
  const MAX_IMAGE_BYTES = 8 << 20; // per file (the server's body limit is 16 MiB by default)
  function cleanConv(c) {
    if (!c || typeof c !== 'object' || typeof c.id !== 'string') return null;
    const msgs = Array.isArray(c.messages) ? c.messages : [];
    return {
      id: c.id, title: str(c.title) || 'New chat', system: str(c.system),
      updated: Number(c.updated) || 0,
      messages: msgs.filter((m) => m && ROLES.includes(m.role)).map((m) => ({
        role: m.role, content: str(m.content), error: str(m.error) || undefined,
        stats: cleanStats(m.stats), images: cleanImages(m.images),
      })),
    };
  }
  // Images of a user message: PNG or JPEG data: URLs, nothing else.
  const IMAGE_URL = /^data:image\/(png|jpeg);base64,[A-Za-z0-9+/]+=*$/;
  function cleanImages(a) {
    if (!Array.isArray(a)) return undefined;
    const ok = a.filter((u) => typeof u === 'string' && IMAGE_URL.test(u)).slice(0, MAX_IMAGES);
    return ok.length ? ok : undefined;
  }
  function cleanStats(s) {
    if (!s || typeof s !== 'object') return undefined;
    const o = {};
    for (const k of ['prompt', 'completion', 'tps', 'ttft']) if (Number.isFinite(s[k])) o[k] = s[k];
    if (s.approx === true) o.approx = true;
    if (typeof s.finish === 'string') o.finish = s.finish;
    return o;
  }
  let convs = (Array.isArray(load(K.convs, [])) ? load(K.convs, []) : []).map(cleanConv).filter(Boolean);
  let currentId = str(load(K.cur, ''));
  let settings = load(K.settings, {}) || {};
  let apiKey = localStorage.getItem(K.key) || '';
  let defaults = {};
  let busy = null; // {ctrl, conv, msg} while an answer streams
  let vision = false; // the model reads images (/v1/status model.vision)
  let attached = []; // images for the next message (data: URLs)

  // Images may not fit in localStorage: then the conversations are kept
  // without them (they stay in this page until it is closed).
  const persist = () => {
    if (!save(K.convs, convs)) {
      save(K.convs, convs.map((c) => Object.assign({}, c, {
        messages: c.messages.map((m) => Object.assign({}, m, { images: undefined })) })));
    }
    save(K.cur, currentId);
  };
  const conv = () => convs.find((c) => c.id === currentId) || null;
  const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

  // ---- API ------------------------------------------------------------------
  let keyPromise = null;
  function askKey(refused) {
    if (!keyPromise) {
      keyPromise = new Promise((resolve) => {
        const dlg = $('key-dialog'), input = $('key-input');
        dlg.querySelector('p').textContent = refused ? 'The API key was refused. Enter the key:'
                                                     : 'This server needs an API key.';
        input.value = '';
        const done = (ev) => {
          ev.preventDefault();
          const v = input.value.trim();
          if (!v) return;
          $('key-form').removeEventListener('submit', done);
          dlg.close();
          keyPromise = null;
          resolve(v);
        };
        $('key-form').addEventListener('submit', done);
        dlg.showModal();
        input.focus();
      });
    }
    return keyPromise;
  }
  async function api(path, opts) {
    opts = opts || {};
    for (let attempt = 0; ; attempt++) {
      const headers = { 'Content-Type': 'application/json' };
      if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
      const r = await fetch(path, Object.assign({}, opts, { headers }));
      if (r.status !== 401 || attempt >= 5) return r;
      const refused = !!apiKey;
      apiKey = await askKey(refused);
      localStorage.setItem(K.key, apiKey);
      $('forget-key').hidden = false;
    }
  }
  async function errorText(r) {
    try { const j = await r.json(); return (j.error && j.error.message) || 'HTTP ' + r.status; } catch (e) { return 'HTTP ' + r.status; }
  }

  // ---- Markdown (a safe subset, rendered to DOM nodes) -----------------------
  // Blocks: fenced code, headings, lists, block quotes, rules, paragraphs.
  // Inline: code, bold, italic, links and bare URLs (http and https only).
  // Nothing is ever parsed as HTML: text becomes text nodes.
  const LIST = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
  function md(src, into) {
    const lines = String(src).replace(/\r\n?/g, '\n').split('\n');
    let para = [];
    const flush = () => {
      if (para.length) { const p = el('p'); inline(para.join('\n'), p); into.appendChild(p); para = []; }
    };
    for (let i = 0; i < lines.length;) {
      const line = lines[i];
      const fence = /^\s{0,3}(`{3,}|~{3,})\s*([^\s`]*)/.exec(line);
      if (fence) {
        flush();
        const code = [];
        for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) code.push(lines[i]);
        i++;
        into.appendChild(codeBlock(code.join('\n'), fence[2]));
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      const h = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
      if (h) { flush(); const e = el('h' + h[1].length); inline(h[2], e); into.appendChild(e); i++; continue; }
      if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) { flush(); into.appendChild(el('hr')); i++; continue; }
      if (/^\s{0,3}>/.test(line)) {
        flush();
        const q = [];
        for (; i < lines.length && /^\s{0,3}>/.test(lines[i]); i++) q.push(lines[i].replace(/^\s{0,3}>\s?/, ''));
        const bq = el('blockquote');
        md(q.join('\n'), bq);
        into.appendChild(bq);
        continue;
      }
      const li = LIST.exec(line);
      if (li) {
        flush();
        const ordered = /\d/.test(li[1]);
        const list = el(ordered ? 'ol' : 'ul');
        if (ordered && parseInt(li[1], 10) !== 1) list.start = parseInt(li[1], 10);
        while (i < lines.length) {
          const m = LIST.exec(lines[i]);
          if (!m || /\d/.test(m[1]) !== ordered) break;
          let text = m[2];
          for (i++; i < lines.length && /^\s{2,}\S/.test(lines[i]) && !LIST.test(lines[i]); i++) text += '\n' + lines[i].trim();
          const item = el('li');
          inline(text, item);
          list.appendChild(item);
        }
        into.appendChild(list);
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
  }
  const INLINE = new RegExp([
    '(`+)([^`][\\s\\S]*?)\\1(?!`)',                  // 1,2 code
    '\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*',             // 3 bold
    '(?:^|(?<=[\\s(]))__(?=\\S)([\\s\\S]*?\\S)__(?!\\w)', // 4 bold
    '\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*',            // 5 italic
    '(?:^|(?<=[\\s(]))_(?=\\S)([^_]*?\\S)_(?![\\w])', // 6 italic
    '\\[([^\\]\\n]+)\\]\\(\\s*([^)\\s]+)\\s*\\)',       // 7,8 link
    '(https?:\\/\\/[^\\s<>()]*[^\\s<>().,;:!?\'"])',    // 9 bare URL
    '(\\n)',                                           // 10 line break
  ].join('|'), 'g');
  function inline(text, into) {
    let last = 0, m;
    INLINE.lastIndex = 0;
    const re = new RegExp(INLINE.source, 'g');
    while ((m = re.exec(text))) {
      if (m.index > last) into.appendChild(document.createTextNode(text.slice(last, m.index)));
      if (m[1]) into.appendChild(el('code', '', m[2]));
      else if (m[3] !== undefined || m[4] !== undefined) { const b = el('strong'); inline(m[3] || m[4], b); into.appendChild(b); }
      else if (m[5] !== undefined || m[6] !== undefined) { const e = el('em'); inline(m[5] || m[6], e); into.appendChild(e); }
      else if (m[7] !== undefined) link(m[7], m[8], into, m[0]);
      else if (m[9] !== undefined) link(m[9], m[9], into, m[0]);
      else into.appendChild(el('br'));
      last = re.lastIndex;
    }
    if (last < text.length) into.appendChild(document.createTextNode(text.slice(last)));
  }
  function safeUrl(u) {
    try {
      const url = new URL(u); // relative URLs throw: no base given
      return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
    } catch (e) { return null; }
  }
  function link(label, href, into, raw) {
    const u = safeUrl(href);
    if (!u) { into.appendChild(document.createTextNode(raw)); return; }
    const a = el('a', '', label);
    a.href = u;
    a.target = '_blank';
    a.rel = 'noopener noreferrer nofollow';
    into.appendChild(a);
  }
  function codeBlock(code, lang) {
    const pre = el('pre');
    pre.appendChild(el('code', '', code));
    if (lang) pre.appendChild(el('span', 'lang', lang));
    const b = el('button', 'copy', 'Copy');
    b.type = 'button';
    b.addEventListener('click', () => copy(code, b));
    pre.appendChild(b);
    return pre;
  }
  function copy(text, btn) {
    const ok = () => { const t = btn.textContent; btn.textContent = 'Copied'; setTimeout(() => { btn.textContent = t; }, 1200); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(ok, () => copyFallback(text) && ok());
    } else if (copyFallback(text)) ok();
  }
  function copyFallback(text) {
    const ta = el('textarea');
    ta.value = text;
    ta.style.position = 'fixed';
    ta.style.opacity = '0';
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    ta.remove();
    return ok;
  }

  // ---- conversations --------------------------------------------------------
  function renderList() {
    const ul = $('conv-list');
    ul.replaceChildren();
    for (const c of [...convs].sort((a, b) => b.updated - a.updated)) {
      const li = el('li');
      li.dataset.id = c.id;
      if (c.id === currentId) li.classList.add('active');
      const t = el('button', 'title', c.title);
      t.title = c.title;
      t.addEventListener('click', () => select(c.id));
      const d = el('button', 'del', '\u00d7');
      d.title = 'Delete conversation';
      d.setAttribute('aria-label', 'Delete conversation ' + c.title);
      d.addEventListener('click', () => {
        if (!confirm('Delete "' + c.title + '"?')) return;
        if (busy && busy.conv === c) busy.ctrl.abort();
        convs = convs.filter((x) => x !== c);
        if (currentId === c.id) currentId = convs.length ? convs[0].id : '';
        persist();
        renderAll();
      });
      li.append(t, d);
      ul.appendChild(li);
    }
  }
  function select(id) {
    currentId = id;
    persist();
    renderAll();
    $('sidebar').classList.remove('open');
    $('input').focus();
  }
  function newConv() {
    const c = { id: newId(), title: 'New chat', system: localStorage.getItem(K.system) || '',
                updated: Date.now(), messages: [] };
    convs.push(c);
    currentId = c.id;
    persist();
    return c;
  }

  function statsText(s) {
    if (!s) return '';
    const parts = [];
    if (s.completion !== undefined) {
      parts.push((s.prompt !== undefined ? s.prompt + ' + ' : '') + (s.approx ? '~' : '') + s.completion + ' tokens');
    }
    if (s.tps) parts.push(s.tps.toFixed(1) + ' tok/s');
    if (s.ttft !== undefined) parts.push((s.ttft / 1000).toFixed(2) + ' s to first token');
    if (s.finish && s.finish !== 'stop') parts.push(s.finish);
    return parts.join(' \u00b7 ');
  }

  function renderMessage(m, idx, c) {
    const div = el('div', 'msg ' + m.role);
    div.dataset.index = idx;
    if (busy && busy.msg === m) div.classList.add('streaming');
    div.appendChild(el('div', 'who', m.role === 'assistant' ? 'model' : m.role));
    const body = el('div', 'body');
    if (m.role === 'user' && m.images) body.appendChild(thumbs(m.images));
    if (m.role === 'user') body.appendChild(el('div', 'plain', m.content)); // white-space kept by CSS
    else md(m.content, body);
    if (m.error) body.appendChild(el('p', 'err', m.error));
    if (m.error) div.classList.add('error');
    div.appendChild(body);
    const tools = el('div', 'tools');
    const last = idx === c.messages.length - 1;
    if (!(busy && busy.msg === m)) {
      const cp = el('button', 'copy-msg', 'Copy');
      cp.type = 'button';
      cp.addEventListener('click', () => copy(m.content, cp));
      tools.appendChild(cp);
      if (m.role === 'user' && !busy) {
        const ed = el('button', 'edit', 'Edit');
        ed.type = 'button';
        ed.addEventListener('click', () => editMessage(div, m, idx, c));
        tools.appendChild(ed);
      }
      if (m.role === 'assistant' && last && !busy) {
        const rg = el('button', 'regen', 'Regenerate');
        rg.type = 'button';
        rg.addEventListener('click', () => regenerate(c));
        tools.appendChild(rg);
      }
    }
    if (m.role === 'assistant') tools.appendChild(el('span', 'stats', statsText(m.stats)));
    div.appendChild(tools);
    return div;
  }

  function renderMessages() {
    const box = $('messages');
    const c = conv();
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    box.replaceChildren();
    if (!c || !c.messages.length) {
      box.appendChild(el('p', 'empty', 'Ask something. The answer streams from the model this server runs.'));
    } else {
      c.messages.forEach((m, i) => box.appendChild(renderMessage(m, i, c)));
    }
    if (atBottom || busy) box.scrollTop = box.scrollHeight;
  }

  function renderAll() {
    renderList();
    renderMessages();
    const c = conv();
    $('system').value = c ? c.system : localStorage.getItem(K.system) || '';
    document.body.dataset.busy = busy ? '1' : '';
    $('send').hidden = !!busy;
    $('stop').hidden = !busy;
  }

  // Updates only the streaming message (cheap enough per chunk).
  let pending = false;
  function renderStreaming() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (!busy || busy.conv !== conv()) return;
      const box = $('messages');
      const idx = busy.conv.messages.indexOf(busy.msg);
      const old = box.querySelector('.msg[data-index="' + idx + '"]');
      if (!old) { renderMessages(); return; }
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 60;
      old.replaceWith(renderMessage(busy.msg, idx, busy.conv));
      if (atBottom) box.scrollTop = box.scrollHeight;
    });
  }

  function editMessage(div, m, idx, c) {
    const body = div.querySelector('.body');
    const ta = el('textarea');
    ta.value = m.content;
    const ok = el('button', 'primary resend', 'Send');
    const no = el('button', '', 'Cancel');
    ok.type = no.type = 'button';
    body.replaceChildren(ta, ok, no);
    div.querySelector('.tools').replaceChildren();
    ta.focus();
    const go = () => {
      if (busy || !ta.value.trim()) return;
      m.content = ta.value;
      c.messages.length = idx + 1;
      if (idx === 0) c.title = title(m.content);
      generate(c);
    };
    ok.addEventListener('click', go);
    no.addEventListener('click', renderMessages);
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); go(); }
      if (e.key === 'Escape') { e.preventDefault(); renderMessages(); }
    });
  }

  const title = (t) => t.replace(/\s+/g, ' ').trim().slice(0, 60) || 'New chat';

  function regenerate(c) {
    if (busy) return;
    while (c.messages.length && c.messages[c.messages.length - 1].role === 'assistant') c.messages.pop();
    if (c.messages.length) generate(c);
  }

  // Sampling fields: empty means the server's default.
  const FIELDS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];
  function sampling() {
    const o = {};
    for (const f of FIELDS) {
      const v = settings[f];
      if (v === undefined || v === null || v === '') continue;
      const n = Number(v);
      if (Number.isFinite(n)) o[f] = f === 'top_k' || f === 'max_tokens' || f === 'seed' ? Math.trunc(n) : n;
    }
    return o;
  }

  // The one place messages become request content: a user message with
  // images is a list of parts, the images (data: URLs) before the text.
  function requestMessages(c, upto) {
    const out = [];
    if (c.system.trim()) out.push({ role: 'system', content: c.system });
    for (const m of c.messages.slice(0, upto)) {
      if (m.role === 'system' || (m.role === 'assistant' && !m.content)) continue;
      if (m.role === 'user' && m.images && m.images.length) {
        const parts = m.images.map((url) => ({ type: 'image_url', image_url: { url } }));
        if (m.content) parts.push({ type: 'text', text: m.content });
        out.push({ role: 'user', content: parts });
      } else out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  async function generate(c) {
    const msg = { role: 'assistant', content: '' };
    const upto = c.messages.length;
    c.messages.push(msg);
    c.updated = Date.now();
    const ctrl = new AbortController();
    busy = { ctrl, conv: c, msg };
    persist();
    renderAll();
    const body = Object.assign({ messages: requestMessages(c, upto), stream: true,
                                 stream_options: { include_usage: true } }, sampling());
    const t0 = performance.now();
    let tFirst = 0, tLast = 0, chunks = 0, usage = null, finish = null;
    try {
      const r = await api('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal: ctrl.signal });
      if (!r.ok) throw new Error(await errorText(r));
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let k;
        while ((k = buf.search(/\r?\n\r?\n/)) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k).replace(/^\r?\n\r?\n/, '');
          for (const line of ev.split(/\r?\n/)) {
            if (!line.startsWith('data:')) continue;
            const data = line.slice(5).trim();
            if (data === '[DONE]') continue;
            const o = JSON.parse(data);
            if (o.error) throw new Error(o.error.message || 'server error');
            if (o.usage) usage = o.usage;
            for (const ch of o.choices || []) {
              const t = ch.delta && ch.delta.content;
              if (t) {
                const now = performance.now();
                if (!tFirst) tFirst = now;
                tLast = now;
                chunks++;
                msg.content += t;
                renderStreaming();
              }
              if (ch.finish_reason) finish = ch.finish_reason;
            }
          }
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') finish = 'stopped';
      else msg.error = String(e.message || e);
    }
    const n = usage ? usage.completion_tokens : chunks;
    msg.stats = { completion: n, approx: !usage, finish: finish || undefined };
    if (usage) msg.stats.prompt = usage.prompt_tokens;
    if (tFirst) {
      msg.stats.ttft = Math.round(tFirst - t0);
      // decode speed: tokens after the first over the time they took
      if (n > 1 && tLast > tFirst) msg.stats.tps = (n - 1) / ((tLast - tFirst) / 1000);
    }
    busy = null;
    c.updated = Date.now();
    persist();
    renderAll();
    if (document.activeElement === document.body) $('input').focus();
  }

  function send() {
    const input = $('input');
    const text = input.value;
    if (busy || (!text.trim() && !attached.length)) return;
    const c = conv() || newConv();
    if (!c.messages.length) c.title = text.trim() ? title(text) : 'Image';
    const m = { role: 'user', content: text };
    if (attached.length) m.images = attached.map((a) => a.url);
    c.messages.push(m);
    input.value = '';
    attached = [];
    attachError = '';
    renderAttachments();
    autosize();
    generate(c);
  }

  // ---- images -----------------------------------------------------------------
  function thumbs(urls, onRemove) {
    const box = el('div', 'thumbs');
    urls.forEach((u, i) => {
      const fig = el('span', 'thumb');
      const img = el('img');
      img.src = u; // a checked data: URL (cleanImages / attachFiles)
      img.alt = 'image ' + (i + 1);
      fig.appendChild(img);
      if (onRemove) {
        const x = el('button', 'remove', '\u00d7');
        x.type = 'button';
        x.title = 'Remove image';
        x.setAttribute('aria-label', 'Remove image ' + (i + 1));
        x.addEventListener('click', () => onRemove(i));
        fig.appendChild(x);
      }
      box.appendChild(fig);
    });
    return box;
  }
  function renderAttachments() {
    const box = $('attachments');
    box.replaceChildren();
    box.hidden = !attached.length;
    if (attached.length) {
      box.appendChild(thumbs(attached.map((a) => a.url), (i) => { attached.splice(i, 1); renderAttachments(); }));
    }
    if (attachError) {
      box.hidden = false;
      box.appendChild(el('span', 'err', attachError));
    }
  }
  let attachError = ''; // why the last file was refused, shown next to the thumbnails
  const readUrl = (f) => new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error);
    r.readAsDataURL(f);
  });
  // Attaches PNG and JPEG files (others are refused with a note).
  async function attachFiles(files) {
    attachError = '';
    for (const f of files) {
      if (attached.length >= MAX_IMAGES) { attachError = 'At most ' + MAX_IMAGES + ' images a message.'; break; }
      if (f.type !== 'image/png' && f.type !== 'image/jpeg') { attachError = f.name + ': only PNG and JPEG images.'; continue; }
      if (f.size > MAX_IMAGE_BYTES) { attachError = f.name + ': larger than 8 MiB.'; continue; }
      try {
        const url = await readUrl(f);
        if (IMAGE_URL.test(url)) attached.push({ url, name: f.name });
        else attachError = f.name + ': cannot be read.';
      } catch (e) { attachError = f.name + ': cannot be read.'; }
    }
    renderAttachments();
  }
  const imageFiles = (list) => [...(list || [])].filter((f) => f.type && f.type.startsWith('image/'));
  function showVision(on) {
    vision = on;
    $('attach').hidden = !on;
    if (!on && attached.length) { attached = []; renderAttachments(); }
  }
  function autosize() {
    const t = $('input');
    t.style.height = 'auto';
    t.style.height = Math.min(t.scrollHeight + 2, window.innerHeight * 0.4) + 'px';
  }

  // ---- settings -------------------------------------------------------------
  function showDefaults() {
    const ph = { max_tokens: 'rest of context', seed: 'random' };
    for (const f of FIELDS) {
      const inp = $('s-' + f);
      const d = defaults[f];
      inp.placeholder = d === null || d === undefined ? ph[f] || '' : f === 'top_k' && d === 0 ? '0 (off)' : String(d);
      inp.value = settings[f] === undefined ? '' : settings[f];
    }
  }

  // ---- dashboard ------------------------------------------------------------
  const HISTORY = 300; // samples (one a second: five minutes)
  const CARDS = [
    { id: 'decode', label: 'Decode', unit: 'tok/s', fmt: (v) => v.toFixed(1) },
    { id: 'prefill', label: 'Prefill', unit: 'tok/s', fmt: (v) => v.toFixed(0) },
    { id: 'running', label: ['Running', 'queued'], unit: 'seq', fmt: (v, x) => v + ' / ' + x.waiting, second: 'waiting' },
    { id: 'kv', label: 'KV cache', unit: '%', fmt: (v) => v.toFixed(1), max: 100 },
    { id: 'rss', label: 'Process RSS', unit: 'MiB', fmt: (v) => v.toFixed(0) },
    { id: 'cpu', label: 'CPU use', unit: 'cores', fmt: (v) => v.toFixed(2) },
    { id: 'dmem', label: 'Device memory used / budget', unit: 'GiB',
      fmt: (v, x) => v.toFixed(2) + ' / ' + x.dbudget.toFixed(1), peak: (v) => v.toFixed(2) + ' GiB' },
    { id: 'busy', label: 'GPU busy', unit: '%', fmt: (v) => v.toFixed(0), max: 100 },
  ];
  const series = {};
  let prev = null;
  function buildCards() {
    const box = $('cards');
    for (const c of CARDS) {
      const card = el('div', 'card');
      card.dataset.metric = c.id;
      const label = el('div', 'label');
      if (Array.isArray(c.label)) label.append(el('span', 'k1', c.label[0]), ' / ', el('span', 'k2', c.label[1]));
      else label.textContent = c.label;
      card.appendChild(label);
      const v = el('div', 'value', '\u2013');
      card.appendChild(v);
      card.appendChild(el('canvas'));
      box.appendChild(card);
      series[c.id] = [];
      if (c.second) series[c.second] = [];
    }
  }
  function push(id, v) {
    const s = series[id];
    s.push(v);
    if (s.length > HISTORY) s.shift();
  }
  function plot(canvas, a, b, max, fmtTop) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * dpr)) canvas.width = Math.round(w * dpr);
    if (canvas.height !== Math.round(h * dpr)) canvas.height = Math.round(h * dpr);
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    const peak = Math.max(0, ...a, ...(b || []));
    let top = max || Math.max(1e-9, peak) * 1.15;
    const line = (s, color, fill) => {
      if (!s.length) return;
      // the window grows with the history, from one minute up to HISTORY
      const span = Math.min(HISTORY, Math.max(60, s.length)) - 1;
      const x = (i) => w - (s.length - 1 - i) * (w / span);
      const y = (v) => h - 2 - (Math.min(v, top) / top) * (h - 4);
      g.beginPath();
      s.forEach((v, i) => (i ? g.lineTo(x(i), y(v)) : g.moveTo(x(i), y(v))));
      g.strokeStyle = color;
      g.lineWidth = 1.5;
      g.stroke();
      if (fill) {
        g.lineTo(x(s.length - 1), h);
        g.lineTo(x(0), h);
        g.closePath();
        g.globalAlpha = 0.15;
        g.fillStyle = color;
        g.fill();
        g.globalAlpha = 1;
      }
    };
    g.strokeStyle = css.getPropertyValue('--line');
    g.beginPath();
    g.moveTo(0, h - 0.5);
    g.lineTo(w, h - 0.5);
    g.stroke();
    if (b) line(b, css.getPropertyValue('--plot2').trim(), false);
    line(a, css.getPropertyValue('--plot').trim(), true);
    g.fillStyle = css.getPropertyValue('--muted').trim();
    g.font = '10px system-ui, sans-serif';
    g.textBaseline = 'top';
    const secs = Math.min(HISTORY, Math.max(60, a.length));
    g.fillText((max ? 'scale ' + max : 'peak ' + fmtTop(peak)) + ' \u00b7 last ' +
               (secs >= 120 ? Math.round(secs / 60) + ' min' : secs + ' s'), 2, 1);
  }
  function info(s) {
    const box = $('dash-info');
    box.replaceChildren();
    const up = Math.round(s.uptime_s);
    const items = [
      ['model', s.model.id], ['state', s.state], ['backend', s.engine.backend], ['device', s.engine.device],
      ['threads', s.engine.threads === null ? 'auto' : s.engine.threads],
      ['slots', s.engine.slots], ['context', s.model.n_ctx ? s.model.n_ctx + ' per slot' : '\u2013'],
      ['requests', s.http.requests], ['uptime', Math.floor(up / 3600) + 'h ' + Math.floor(up / 60) % 60 + 'm ' + up % 60 + 's'],
    ];
    for (const [k, v] of items) {
      const span = el('span');
      span.dataset.key = k;
      span.append(el('b', '', k), document.createTextNode(String(v)));
      box.appendChild(span);
    }
    const dm = s.device_memory;
    $('dash-note').textContent = !dm ? 'Device memory is reported once the model is loaded.'
      : dm.source === 'host' ? 'CPU backend: the memory card shows the weights and KV cache against the machine\'s memory; GPU busy time is measured on Vulkan devices.'
      : dm.source === 'heaps' ? 'This device has no memory budget query: used is what ignis allocated, of the device-local heaps.' : '';
    const label = document.querySelector('.card[data-metric="dmem"] .label');
    if (dm) label.textContent = dm.source === 'host' ? 'Weights + KV cache / memory' : 'Device memory used / budget';
    document.querySelector('.card[data-metric="busy"]').hidden = !s.device_busy;
  }
  function onStatus(s) {
    const rate = (f) => {
      if (!prev) return 0;
      const dt = s.time - prev.time;
      return dt > 0 ? Math.max(0, (f(s) - f(prev)) / dt) : 0;
    };
    const vals = {
      decode: rate((x) => x.tokens.generated),
      prefill: rate((x) => x.tokens.prefill),
      running: s.sequences.running,
      waiting: s.sequences.waiting,
      kv: s.kv_cache.usage * 100,
      rss: s.process.rss_bytes === null ? 0 : s.process.rss_bytes / 1048576,
      cpu: rate((x) => x.process.cpu_seconds),
      dmem: s.device_memory ? s.device_memory.used_bytes / 1073741824 : 0,
      dbudget: s.device_memory ? s.device_memory.budget_bytes / 1073741824 : 0,
      // the GPU's busy time over the wall time between two polls
      busy: s.device_busy && prev && prev.device_busy ? Math.min(100, 100 * rate((x) => x.device_busy.seconds)) : 0,
    };
    prev = s;
    for (const k of Object.keys(series)) push(k, vals[k]);
    for (const c of CARDS) {
      const card = document.querySelector('.card[data-metric="' + c.id + '"]');
      const v = card.querySelector('.value');
      v.replaceChildren(document.createTextNode(c.fmt(vals[c.id], vals)), el('span', 'unit', c.unit));
      v.dataset.raw = String(vals[c.id]);
      if (!$('dash').hidden) {
        plot(card.querySelector('canvas'), series[c.id], c.second ? series[c.second] : null, c.max,
             (v) => (c.peak ? c.peak(v) : c.second ? String(v) : c.fmt(v, vals)));
      }
    }
    info(s);
  }

  let pollTimer = 0;
  async function poll() {
    clearTimeout(pollTimer);
    try {
      const r = await api('/v1/status');
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const s = await r.json();
      $('conn').className = 'conn ' + (s.state === 'ready' ? 'ok' : 'bad');
      $('conn').title = 'Server: ' + s.state;
      $('model').textContent = s.model.id;
      if (!!s.model.vision !== vision) showVision(!!s.model.vision);
      if (!Object.keys(defaults).length) { defaults = s.defaults || {}; showDefaults(); }
      if (s.api_key_required && apiKey) $('forget-key').hidden = false;
      onStatus(s);
    } catch (e) {
      $('conn').className = 'conn bad';
      $('conn').title = 'Server unreachable';
    }
    if (!document.hidden) pollTimer = setTimeout(poll, 1000);
  }

  // ---- tabs and keys ----------------------------------------------------------
  function showTab(name) {
    const dash = name === 'dashboard';
    $('chat').hidden = dash;
    $('dash').hidden = !dash;
    $('tab-chat').setAttribute('aria-selected', String(!dash));
    $('tab-dash').setAttribute('aria-selected', String(dash));
    if (location.hash !== (dash ? '#dashboard' : '')) history.replaceState(null, '', dash ? '#dashboard' : location.pathname);
    if (dash) poll();
    else $('input').focus();
  }

  function init() {
    buildCards();
    if (apiKey) $('forget-key').hidden = false;
    if (!conv()) currentId = convs.length ? [...convs].sort((a, b) => b.updated - a.updated)[0].id : '';
    $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
    $('input').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    });
    $('input').addEventListener('input', autosize);
    $('attach').addEventListener('click', () => $('file').click());
    $('file').addEventListener('change', (e) => { attachFiles(imageFiles(e.target.files)); e.target.value = ''; });
    $('input').addEventListener('paste', (e) => {
      const files = vision ? imageFiles(e.clipboardData && e.clipboardData.files) : [];
      if (files.length) { e.preventDefault(); attachFiles(files); }
    });
    const conversation = document.querySelector('.conversation');
    conversation.addEventListener('dragover', (e) => {
      if (!vision || !e.dataTransfer || ![...e.dataTransfer.types].includes('Files')) return;
      e.preventDefault();
      conversation.classList.add('drop');
    });
    conversation.addEventListener('dragleave', (e) => {
      if (!conversation.contains(e.relatedTarget)) conversation.classList.remove('drop');
    });
    conversation.addEventListener('drop', (e) => {
      conversation.classList.remove('drop');
      if (!vision) return;
      e.preventDefault();
      attachFiles(imageFiles(e.dataTransfer && e.dataTransfer.files));
    });
    $('stop').addEventListener('click', () => busy && busy.ctrl.abort());
    $('new-chat').addEventListener('click', () => { if (!busy) { newConv(); renderAll(); $('input').focus(); } });
    $('menu').addEventListener('click', () => $('sidebar').classList.toggle('open'));
    $('tab-chat').addEventListener('click', () => showTab('chat'));
    $('tab-dash').addEventListener('click', () => showTab('dashboard'));
    $('system').addEventListener('input', () => {
      const v = $('system').value;
      localStorage.setItem(K.system, v);
      const c = conv();
      if (c) { c.system = v; persist(); }
    });
    for (const f of FIELDS) {
      $('s-' + f).addEventListener('input', (e) => {
        const v = e.target.value.trim();
        if (v === '') delete settings[f]; else settings[f] = v;
        save(K.settings, settings);
      });
    }
    $('reset-settings').addEventListener('click', () => { settings = {}; save(K.settings, settings); showDefaults(); });
    $('forget-key').addEventListener('click', () => {
      apiKey = '';
      localStorage.removeItem(K.key);
      $('forget-key').hidden = true;
    });
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && busy) { e.preventDefault(); busy.ctrl.abort(); }
      if (e.altKey && !e.ctrlKey && !e.metaKey) {
        if (e.key === 'n' || e.key === 'N') { e.preventDefault(); $('new-chat').click(); }
        if (e.key === '1') { e.preventDefault(); showTab('chat'); }
        if (e.key === '2') { e.preventDefault(); showTab('dashboard'); }
      }
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) poll(); });
    window.addEventListener('storage', (e) => {
      if (e.key === K.convs && !busy) { convs = (load(K.convs, []) || []).map(cleanConv).filter(Boolean); renderAll(); }
    });
    renderAll();
    showDefaults();
    showTab(location.hash === '#dashboard' ? 'dashboard' : 'chat');
    if ($('dash').hidden) poll();
  }
  init();
})();
