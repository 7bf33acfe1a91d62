// The four articles biaslab grew out of (Chinese blog posts, not linked: the page fetches nothing
// from other hosts) and what each one claims, in our own words, with the presets that check each
// claim. The presets' own sentences come from the engine (presets(), read by the page's build);
// this table only links them to the claims. Pure data; no DOM (test/node/articles.test.js checks
// every preset name).

/** @typedef {{id: string, text: string, presets: string[]}} Claim */
/** @typedef {{n: number, title: string, gloss: string, author: string | null, claims: Claim[]}} Article */

/** @type {Article[]} */
export const ARTICLES = [
  {
    n: 1,
    title: '全连接层偏置项是否保留的研究',
    gloss: 'Should a fully connected layer keep its bias? A study',
    author: '朱梦 (Zhu Meng)',
    claims: [
      { id: '1.1', text: 'A bias on the key projection shifts every attention score of a query by the same amount, and softmax ignores such a shift: the key bias is strictly redundant. The query bias is not.', presets: ['article1-qk-softmax', 'default', 'causal-decoder-layer', 'prenorm-transformer-rope', 'gpt2-block', 'qwen2-block', 'gpt-oss-block', 'pythia-block'] },
      { id: '1.2', text: 'A Linear bias directly before BatchNorm in training mode is strictly redundant: the batch mean of each feature takes it away.', presets: ['article1-linear-batchnorm', 'norm-zoo', 'resnet-basic-block'] },
      { id: '1.3', text: 'Before LayerNorm the bias is only "not strictly" redundant. Made precise here: exactly one direction of it (its mean over the features) cancels, the rest matters.', presets: ['article1-linear-layernorm', 'norm-zoo', 'convnext-block', 'vit-block'] },
      { id: '1.4', text: 'Common practice: in a pre-norm block only the key bias is redundant; in a post-norm block the attention biases are usually of little use. The page says which directions exactly.', presets: ['prenorm-transformer', 'postnorm-transformer', 'default', 'gpt2-block', 'bert-layer'] },
    ],
  },
  {
    n: 2,
    title: '关于attention bias的一些思考 (为什么transformer没有QKV bias)',
    gloss: 'Some thoughts on attention biases (why transformers have no QKV bias)',
    author: null,
    claims: [
      { id: '2.1', text: 'Attention without positional information does not care about the order of keys and values (permuting them together changes nothing), and reordering the queries reorders the output the same way. A causal mask or rotary positions break this.', presets: ['default', 'prenorm-transformer-rope', 'causal-decoder-layer', 'llama-block', 'whisper-decoder-block'] },
      { id: '2.2', text: 'The key bias cancels inside softmax; the value bias comes out of attention as the same vector for every token, so it can move into the output bias.', presets: ['article2-all-biases', 'default', 'gpt2-block', 'bert-layer', 'qwen2-block', 'gpt-oss-block', 'pythia-block', 'vit-block', 'whisper-decoder-block'] },
      { id: '2.3', text: 'A float32 check (1024 features, 32 heads, 16 tokens) changes the output only at rounding level when the key bias changes: a mean difference of about 1e-8, not zero.', presets: ['article2-key-bias'] },
    ],
  },
  {
    n: 3,
    title: '关于FFN与Add&Norm的一些学习与思考',
    gloss: 'Notes on the feed-forward network and Add & Norm',
    author: null,
    claims: [
      { id: '3.1', text: 'BatchNorm, LayerNorm, InstanceNorm, GroupNorm and RMSNorm differ in what they average over; that decides which bias directions each one removes.', presets: ['norm-zoo', 'resnet-basic-block', 'convnext-block'] },
      { id: '3.2', text: 'LayerNorm is unchanged when a token is shifted or scaled; RMSNorm keeps only the scaling part, so it cancels no bias direction.', presets: ['causal-decoder-layer', 'norm-zoo', 'default', 'llama-block', 'qwen3-block'] },
    ],
  },
  {
    n: 4,
    title: 'LayerNorm 层后接 Linear 层的转化形式',
    gloss: 'Rewriting a LayerNorm followed by a Linear layer',
    author: '采石工 (“the quarryman”, a pen name)',
    claims: [
      { id: '4.1', text: 'The gain and shift of a LayerNorm can be moved into the Linear layer after it (its weight scaled by the gain, the shift pushed through the weight into its bias), leaving a LayerNorm without parameters and the same output.', presets: ['article4-layernorm-linear', 'default', 'prenorm-transformer', 'gpt2-block', 'llama-block', 'pythia-block'] },
    ],
  },
];

/** The claims a preset checks. @returns {Claim[]} */
export function claims_of(preset_name) {
  return ARTICLES.flatMap((a) => a.claims).filter((c) => c.presets.includes(preset_name));
}
