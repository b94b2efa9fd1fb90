// An allow-list HTML sanitizer for the editor field. Input is parsed with DOMParser (an inert
// document: no script runs, no image loads); only the elements and attributes below survive, and
// the result is produced as DOM nodes of the target document (never through innerHTML) or as an
// escaped HTML string for the server.

const ALLOWED = new Set([
  "P", "BR", "B", "STRONG", "I", "EM", "U", "S", "A", "UL", "OL", "LI",
  "H1", "H2", "H3", "H4", "BLOCKQUOTE", "CODE", "PRE", "DIV", "SPAN", "HR",
]);
// Dropped together with their content.
const DROP = new Set([
  "SCRIPT", "STYLE", "IFRAME", "OBJECT", "EMBED", "TEMPLATE", "NOSCRIPT", "SVG", "MATH",
  "TITLE", "META", "LINK", "BASE", "FORM", "INPUT", "TEXTAREA", "SELECT", "BUTTON",
]);
const VOID = new Set(["BR", "HR"]);

/** Only http(s) and mailto links are kept. */
export function safeHref(href: string | null): string | null {
  if (!href) return null;
  const v = href.trim();
  if (/^mailto:/i.test(v)) return v;
  try {
    const u = new URL(v);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
  } catch {
    return null;
  }
}

type Clean = { tag: string; href?: string; children: Clean[] } | { text: string };

function clean(node: Node): Clean[] {
  const out: Clean[] = [];
  node.childNodes.forEach((child) => {
    if (child.nodeType === 3) {
      out.push({ text: child.nodeValue || "" });
    } else if (child.nodeType === 1) {
      const el = child as Element;
      const tag = el.tagName.toUpperCase();
      if (DROP.has(tag)) return;
      const kids = clean(el);
      if (!ALLOWED.has(tag)) {
        out.push(...kids); // unwrap unknown elements, keep their text
        return;
      }
      const c: Clean = { tag, children: kids };
      if (tag === "A") {
        const href = safeHref(el.getAttribute("href"));
        if (href) c.href = href;
      }
      out.push(c);
    }
  });
  return out;
}

function parse(html: string): Clean[] {
  const doc = new DOMParser().parseFromString(String(html ?? ""), "text/html");
  return clean(doc.body);
}

const esc = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

function serialize(nodes: Clean[]): string {
  return nodes
    .map((n) => {
      if ("text" in n) return esc(n.text);
      const t = n.tag.toLowerCase();
      if (VOID.has(n.tag)) return `<${t}>`;
      const attrs = n.href ? ` href="${esc(n.href)}" rel="noopener noreferrer"` : "";
      return `<${t}${attrs}>${serialize(n.children)}</${t}>`;
    })
    .join("");
}

/** Sanitized HTML string (for sending to the server). */
export function sanitizeHtml(html: string): string {
  return serialize(parse(html));
}

/** Sanitized DOM nodes, created in `doc` (for showing inside the page). */
export function sanitizedNodes(html: string, doc: Document = document): Node[] {
  const build = (nodes: Clean[]): Node[] =>
    nodes.map((n) => {
      if ("text" in n) return doc.createTextNode(n.text);
      const el = doc.createElement(n.tag.toLowerCase());
      if (n.href) {
        el.setAttribute("href", n.href);
        el.setAttribute("rel", "noopener noreferrer");
        el.setAttribute("target", "_blank");
      }
      for (const k of build(n.children)) el.appendChild(k);
      return el;
    });
  return build(parse(html));
}

/** True when `root` holds anything the allow-list would change (used to re-clean on input). */
export function needsCleaning(root: Element): boolean {
  const walk = (el: Element): boolean => {
    for (const child of Array.from(el.children)) {
      const tag = child.tagName.toUpperCase();
      if (!ALLOWED.has(tag)) return true;
      for (const a of Array.from(child.attributes)) {
        if (tag === "A" && (a.name === "href" || a.name === "rel" || a.name === "target")) {
          if (a.name === "href" && !safeHref(a.value)) return true;
          continue;
        }
        return true;
      }
      if (walk(child)) return true;
    }
    return false;
  };
  return walk(root);
}
