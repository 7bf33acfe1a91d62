// The glossary's texts (see glossary.js), a chunk of their own: fetched on the first tooltip,
// the first opening of the glossary, or at idle after the first results are drawn.

/** @typedef {{id: string, term: string, text: string}} Entry */

/** @type {{title: string, entries: Entry[]}[]} */
export const GLOSSARY = [
  {
    title: 'Verdicts',
    entries: [
      { id: 'redundant', term: 'redundant', text: 'Moving the bias by a random vector (RMS 1 per entry) changes the output by no more than the noise floor: within rounding, the bias does nothing, and it can be dropped or folded away.' },
      { id: 'partly_redundant', term: 'partly redundant', text: 'The random move changes the output beyond the noise floor, but a move inside the bias\'s redundant directions (the k of "k of n") stays below it: k directions do nothing, the other n − k matter.' },
      { id: 'effective', term: 'effective', text: 'The random move changes the output beyond the noise floor, and no move inside redundant directions was shown to stay below it: the bias matters.' },
      { id: 'undetermined', term: 'undetermined', text: 'The structural analysis could not settle the redundant dimension, so the row gives bounds, "min-max of n": at least min and at most max directions are redundant. Either a limit (4,096 inputs, or the compute budget per bias) ran out before a stop rule held, or a ReLU lies on the way and some unit was never active (dead, or only rarely active: sampling cannot tell), or a finite move along the null directions found changed the output (a region of inputs the sample missed may act along them). The rank found is certain in every case; the reason is in the row.' },
    ],
  },
  {
    title: 'Terms',
    entries: [
      { id: 'k_of_n', term: 'k of n (redundant dimension)', text: 'The bias has n entries; k is the dimension of its null space: the directions along which moving it leaves the output unchanged for every input. Computed as the nullity of the Jacobian of the output with respect to the bias, stacked over random inputs until a stop rule holds.' },
      { id: 'all_ones', term: 'all-ones', text: 'The direction (1, 1, …, 1): adding the same number to every entry of the bias. A LayerNorm, or anything else that subtracts each token\'s mean over features, removes exactly this direction.' },
      { id: 'wo_bv', term: 'W_O b_V along all-ones', text: 'A value bias b_V passes attention unchanged (each row of softmax weights sums to 1), so every token gains the same vector W_O b_V. Its part along all-ones cancels in the normalisation after it: one direction of b_V, the one W_O maps to all-ones, is redundant.' },
      { id: 'vs_floor', term: 'Δ vs floor', text: 'max |Δ out| divided by the noise floor. "below floor (0.3x)": the change is no larger than rounding can make it. "2.1e13x floor": that many times larger than rounding explains.' },
      { id: 'noise_floor', term: 'noise floor', text: 'How much rounding alone can change this comparison\'s output. The forward runs in the config\'s dtype and in the other precision; the rounding of each side comes from their difference (scaled by 2^-29 for float64), and the floor is 8 × (rounding of one side + rounding of the other). A change at or below it shows no effect.' },
      { id: 'fold', term: 'fold', text: 'A rewrite of the layer stack that removes parameters by absorbing them into a neighbour, e.g. a LayerNorm\'s gain and shift into the next Linear\'s weight and bias. Each fold is applied to a copy, run, and its output compared with the original\'s.' },
      { id: 'exact', term: 'exact', text: 'The rewritten stack\'s output differs from the original\'s by at most the noise floor: the rewrite changes nothing beyond rounding.' },
      { id: 'minimal_model', term: 'minimal model', text: 'The stack after applying exact folds and dropping redundant biases one after another, until none applies: fewer parameters, the same output to the noise floor. It can be loaded into the editor.' },
      { id: 'invariance', term: 'invariance', text: 'A transformation of one layer\'s actual input under which its output should not change (invariant) or should change the same way (equivariant), e.g. shifting each token by a constant before a LayerNorm. Checked against the noise floor.' },
      { id: 'stop_rule', term: 'stop rule', text: 'Why the structural analysis stopped stacking inputs: full_rank (the rank reached n), input_independent (nothing on the way treats tokens differently, so one input decides), no_gain (an input added no rank and nothing on the way is kinked), no_gain_kinked (after a ReLU: a long run of inputs added no rank and woke no new unit), budget (a limit ran out: undetermined).' },
    ],
  },
  {
    title: 'Columns',
    entries: [
      { id: 'bias', term: 'Bias', text: 'The bias as a PyTorch state-dict name: layers.0.body.1.k_proj.bias is the key projection\'s bias in the second layer of the first block\'s body.' },
      { id: 'verdict', term: 'Verdict', text: 'What perturbing the bias showed, checked against its structure: redundant, partly redundant, effective or undetermined (see Verdicts).' },
      { id: 'redundant_dim', term: 'Redundant (k of n)', text: 'How many of the bias\'s n directions change nothing (see k of n). Hover a value for the stop rule that settled it; an undetermined row shows bounds, min-max of n.' },
      { id: 'directions', term: 'Directions', text: 'Which directions are redundant, in words: all, none, all-ones, constant within each group, W_O b_V along all-ones, or a count found numerically.' },
      { id: 'bias_delta', term: 'max |Δ out| (Biases)', text: 'The largest change of any output entry when the bias moves by a random vector with RMS 1 per entry.' },
      { id: 'bias_mean_delta', term: 'mean |Δ out| (Biases)', text: 'The average change over all output entries for the same move: the figure a check that prints the mean absolute difference of two outputs (as the second article\'s does) compares with. Rounding sets both it and the maximum for a redundant bias.' },
      { id: 'why', term: 'Why', text: 'The reason from the layer rules: which operation after the bias cancels it, or why nothing does; and notes when the measurement and the structure disagree.' },
      { id: 'absorbed_by', term: 'Absorbed by', text: 'The parameter a fold moves this bias into, or the folds that drop it; — when none applies.' },
      { id: 'rule', term: 'Rule', text: 'The fold rule\'s name and its identifier in the engine (cpp/folds/).' },
      { id: 'formula', term: 'Formula', text: 'What the fold rewrites, as the identity it relies on.' },
      { id: 'where', term: 'Where', text: 'The layers the rule rewrites, by their state-dict names.' },
      { id: 'params_removed', term: 'Params removed', text: 'How many parameters the rewrite removes.' },
      { id: 'fold_delta', term: 'max |Δ out| (Folds)', text: 'The largest change of any output entry between the original stack and the rewritten one, on the same input.' },
      { id: 'step', term: 'Step', text: 'The order in which the minimal model applies its folds.' },
      { id: 'fold_applied', term: 'Fold applied', text: 'The identifier of the fold rule used at this step.' },
      { id: 'probe', term: 'Probe', text: 'The kind of layer checked and the transformation applied to its input.' },
      { id: 'layer', term: 'Layer', text: 'The layer whose input is transformed, by its state-dict name.' },
      { id: 'transform', term: 'Transform', text: 'The transformation, written on the layer\'s input x (P a permutation of tokens, c a constant, s a scale).' },
      { id: 'expected', term: 'Expected', text: 'What theory predicts for this layer: invariant (output unchanged), equivariant (output transformed the same way) or changes.' },
      { id: 'holds', term: 'Holds', text: 'Whether the output was unchanged (or equivariant) to the noise floor.' },
      { id: 'agrees', term: 'As expected', text: 'Whether the measurement matches the prediction.' },
      { id: 'invariance_delta', term: 'max |Δ| (Invariances)', text: 'The largest difference between the output for the transformed input and the output the invariance predicts.' },
      { id: 'note', term: 'Note', text: 'Why the probe turned out as it did, when that needs saying.' },
    ],
  },
];
