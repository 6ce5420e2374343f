// The text of the one SVG on the page (a plotly export): which text elements leave the image, and which pairs
// overlap. A text's box is its em box (getBBox) less `leading` of its height at top and bottom, mapped through its
// transform into the SVG's coordinates: a turned tick label is a turned rectangle, tested with separating axes.
({leading, slack}) => {
  const svg = document.querySelector('svg');
  const width = +svg.getAttribute('width'), height = +svg.getAttribute('height');
  const toSvg = svg.getScreenCTM().inverse();
  const kind = text => {
    const name = text.getAttribute('class') || '';
    if (/^[xy]\d*title$/.test(name)) return 'axis title';
    const tick = text.closest('g[class$="tick"]');  // xtick, y2tick, …: one tick label of an axis
    if (text.closest('.colorbar')) return tick ? 'colour-bar tick' : 'colour-bar title';
    if (tick) return 'tick';
    if (text.closest('.legend')) return 'legend';
    if (name.includes('gtitle')) return 'title';
    if (text.closest('.annotation')) return 'annotation';
    return name || 'text';
  };
  const boxes = [];
  for (const text of svg.querySelectorAll('text')) {
    const style = getComputedStyle(text);
    if (!text.textContent.trim() || style.display === 'none' || style.visibility === 'hidden' || +style.opacity === 0)
      continue;
    const b = text.getBBox();
    if (!b.width || !b.height) continue;
    const m = toSvg.multiply(text.getScreenCTM());
    const at = (x, y) => ({x: m.a * x + m.c * y + m.e, y: m.b * x + m.d * y + m.f});
    const top = b.y + leading * b.height, bottom = b.y + (1 - leading) * b.height;
    boxes.push({name: `${kind(text)} "${text.textContent.trim()}"`,
                corners: [at(b.x, top), at(b.x + b.width, top), at(b.x + b.width, bottom), at(b.x, bottom)]});
  }
  const inside = p => p.x >= -slack && p.y >= -slack && p.x <= width + slack && p.y <= height + slack;
  const clipped = boxes.filter(box => !box.corners.every(inside)).map(box => box.name);
  const normals = c => [0, 1].map(k => {
    const dx = c[k + 1].x - c[k].x, dy = c[k + 1].y - c[k].y, n = Math.hypot(dx, dy) || 1;
    return {x: -dy / n, y: dx / n};
  });
  const apart = (p, q) => [...normals(p), ...normals(q)].some(axis => {
    const along = c => c.map(v => v.x * axis.x + v.y * axis.y);
    const a = along(p), b = along(q);
    return Math.max(...a) <= Math.min(...b) + slack || Math.max(...b) <= Math.min(...a) + slack;
  });
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++)
    for (let j = i + 1; j < boxes.length; j++)
      if (!apart(boxes[i].corners, boxes[j].corners)) overlaps.push(`${boxes[i].name} × ${boxes[j].name}`);
  return {size: [width, height], clipped, overlaps};
}
