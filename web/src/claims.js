// "What the articles claim": a closed panel listing each source article (title in Chinese, an
// English gloss, the author where the article names one) and its claims, each with buttons that
// load the presets checking it; and the links from a preset's description to its claims. Like
// the glossary, a link opens the panel without touching the URL's fragment (the experiment).
import { h, clear } from './dom.js';
import { ARTICLES, claims_of } from './articles.js';

const claim_dom_id = (id) => `claim-${id.replace('.', '-')}`;

/**
 * @param {HTMLElement} root
 * @param {{presets: {name: string, title: string}[], on_load: (name: string) => void}} props
 */
export function render_claims(root, { presets, on_load }) {
  const title_of = (name) => presets.find((p) => p.name === name)?.title ?? name;
  clear(
    root,
    h(
      'details',
      { id: 'claims-details' },
      h('summary', {}, h('h2', {}, 'What the articles claim')),
      h('p', { class: 'caption' }, 'The four articles biaslab grew out of (in Chinese), their claims in our words, and the presets that check each one. A preset loads into the editor as one undoable step.'),
      ARTICLES.map((a) =>
        h(
          'article',
          { class: 'source-article', 'aria-labelledby': `article-${a.n}-title` },
          h('h3', { id: `article-${a.n}-title` }, `Article ${a.n}: `, h('span', { lang: 'zh' }, a.title)),
          h('p', { class: 'article-meta' }, `“${a.gloss}”`, a.author ? [' · by ', h('span', { lang: a.author.match(/^[\u4e00-\u9fff]/) ? 'zh' : null }, a.author)] : ' · no author named'),
          h(
            'ol',
            { class: 'claim-list' },
            a.claims.map((c) =>
              h(
                'li',
                { id: claim_dom_id(c.id), tabindex: '-1' },
                h('strong', { class: 'claim-id' }, c.id), ' ', c.text,
                h('span', { class: 'claim-presets' }, ' Checked by: ', c.presets.map((name, i) => [i ? ', ' : '', h('button', { type: 'button', class: 'link-button', dataset: { preset: name }, title: `Load the preset "${title_of(name)}"`, onclick: () => on_load(name) }, title_of(name))])),
              ),
            ),
          ),
        ),
      ),
    ),
  );
}

/** "Checks claims 1.1 and 1.4 of the articles": links that open the panel at each claim. */
export function claim_links(preset_name) {
  const claims = claims_of(preset_name);
  if (!claims.length) return null;
  const link = (c) => h('a', { href: `#${claim_dom_id(c.id)}`, class: 'claim-link', onclick: (e) => { e.preventDefault(); show_claim(c.id); } }, c.id);
  return h('span', { class: 'claim-refs' }, ` Checks the articles' claim${claims.length > 1 ? 's' : ''} `, claims.map((c, i) => [i ? (i === claims.length - 1 ? ' and ' : ', ') : '', link(c)]), '.');
}

function show_claim(id) {
  const details = document.getElementById('claims-details');
  const li = document.getElementById(claim_dom_id(id));
  if (!details || !li) return;
  details.open = true;
  li.scrollIntoView({ block: 'center' });
  li.focus({ preventScroll: true });
}
