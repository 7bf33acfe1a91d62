// ?embed=1: the page inside another site's iframe. It shows the experiment and the results,
// links to the full page, reports its height to the parent so the iframe can fit its content,
// and never rewrites its own URL (main.js checks EMBED before replaceState).
//
// Message to the parent: {type: 'biaslab:height', height: <CSS px>}. The parent tells several
// embeds apart by event.source (see docs/embed.md).

export function start_embed({ open_url }) {
  const link = document.getElementById('open-full');
  link.hidden = false;
  link.href = open_url();
  if (window.parent === window) return; // opened directly: nothing to talk to
  const app = document.getElementById('app');
  let last = 0;
  const post = () => {
    // The content's own height, not the viewport's: measuring the document would echo the
    // iframe's current height back and never let it shrink.
    const height = Math.ceil(app.getBoundingClientRect().height);
    if (height === last) return;
    last = height;
    window.parent.postMessage({ type: 'biaslab:height', height }, '*');
  };
  new ResizeObserver(post).observe(app);
  post();
}
