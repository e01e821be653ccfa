// One language at a time (issue 25): catalogues gateway/static/i18n/{zh-Hans,zh-Hant,en}.json with
// the same keys.  The language comes from localStorage ("shuangkou-lang", set by the
// [data-action=lang] switch), else from navigator.languages: zh-CN, zh-SG and plain zh give
// zh-Hans; zh-TW, zh-HK, zh-MO (and zh-Hant) give zh-Hant; anything else gives en.
// <html lang> follows.  Static text carries data-i18n="key" (textContent) or
// data-i18n-attr="attr:key[;attr:key]"; code calls t(key, {param: value}).
export const LANGS = ["zh-Hans", "zh-Hant", "en"];
const KEY = "shuangkou-lang";
let lang = "en";
let words = {};
const listeners = [];
let asked = null;  // the language the last setLang asked for, while its catalogue loads
let calls = 0;

/** The catalogue language for a list of BCP 47 tags (navigator.languages), first match wins. */
export function pickLang(tags) {
  for (const raw of tags || []) {
    const tag = String(raw).toLowerCase();
    if (tag === "zh" || /^zh-(hans|cn|sg|my)\b/.test(tag)) return "zh-Hans";
    if (/^zh-(hant|tw|hk|mo)\b/.test(tag)) return "zh-Hant";
    if (tag.startsWith("zh-")) return "zh-Hans";
    if (tag) return "en";
  }
  return "en";
}

function stored() {
  try {
    const v = localStorage.getItem(KEY);
    return LANGS.includes(v) ? v : null;
  } catch (e) {
    return null;
  }
}

export function currentLang() {
  return lang;
}

/** The text of `key` with {name} placeholders filled in; a missing key shows as the key.  With
 * `n` === 1 the catalogue's singular `<key>.one` is taken where it has one ("1 hand played"). */
export function t(key, params = {}) {
  const one = params.n === 1 && Object.prototype.hasOwnProperty.call(words, `${key}.one`);
  if (one) key = `${key}.one`;
  const text = Object.prototype.hasOwnProperty.call(words, key) ? words[key] : key;
  return text.replace(/\{(\w+)\}/g, (m, k) => (params[k] === undefined || params[k] === null ? m : String(params[k])));
}

/** Whether the catalogue has `key` (for optional words such as a bot level). */
export function has(key) {
  return Object.prototype.hasOwnProperty.call(words, key);
}

/** Fill every data-i18n / data-i18n-attr element under `root`. */
export function applyStatic(root = document) {
  for (const el of root.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll("[data-i18n-attr]")) {
    for (const pair of el.dataset.i18nAttr.split(";")) {
      const [attr, key] = pair.split(":");
      if (attr && key) el.setAttribute(attr.trim(), t(key.trim()));
    }
  }
  document.title = t("app.title");
}

async function load(which) {
  const r = await fetch(`/static/i18n/${which}.json`, { cache: "no-cache" });
  if (!r.ok) throw new Error(`HTTP ${r.status}`);
  return r.json();
}

/** Switch to `which` (remembered when `remember`), fill the page and tell the listeners.  When
 * another switch comes while its catalogue loads, the later one wins. */
export async function setLang(which, remember = true) {
  const next = LANGS.includes(which) ? which : "en";
  const mine = ++calls;
  asked = next;
  const loaded = await load(next);
  if (mine !== calls) return;  // a later switch was asked for meanwhile
  asked = null;
  words = loaded;
  lang = next;
  document.documentElement.lang = next;
  if (remember) {
    try {
      localStorage.setItem(KEY, next);
    } catch (e) {
      // private mode: the choice lasts for this page only
    }
  }
  applyStatic();
  for (const fn of listeners) fn(next);
}

/** The language switch ([data-action=lang]): the next of LANGS after the one last asked for, so
 * two quick presses move two steps. */
export function cycleLang() {
  return setLang(LANGS[(LANGS.indexOf(asked || lang) + 1) % LANGS.length]);
}

export function onLang(fn) {
  listeners.push(fn);
}

/** The first language of this page: the remembered choice, else the browser's. */
export function startLang() {
  return setLang(stored() || pickLang(navigator.languages && navigator.languages.length ? navigator.languages
    : [navigator.language]), false);
}
