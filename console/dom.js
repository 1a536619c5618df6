// A few helpers to build DOM nodes without a framework: h('tag', {attrs}, ...children).
// Children may be nodes, strings, numbers, arrays of those, or null/false (skipped).

const SVG = 'http://www.w3.org/2000/svg';

function build(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'value' && 'value' in element) {
      element.value = value;
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

export function replace(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

// An instant as the viewer's local time, with the full RFC 3339 text as its tooltip.
export function when(text) {
  if (!text) return '—';
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) return text;
  return h('time', { datetime: text, title: text }, date.toLocaleString());
}

export function badge(status) {
  return h('span', { class: `badge badge-${status}` }, status);
}
