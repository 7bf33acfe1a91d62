#include "folds/folds.hpp"

#include <cmath>

#include "core/cold.hpp"

namespace biaslab {

namespace {

using Seq = std::vector<LayerNode>;

std::string name_of(const std::string& prefix, int i) { return layer_name(prefix, static_cast<size_t>(i)); }

bool is(const Seq& s, int i, LayerType t) {
  return i >= 0 && i < static_cast<int>(s.size()) && s[i].cfg.type == t;
}
bool is_bn(const Seq& s, int i, BatchNormMode mode) {
  return is(s, i, LayerType::batchnorm) && s[i].cfg.mode == mode;
}

BIASLAB_COLD void remove_param(LayerNode& n, const std::string& local) {
  for (auto it = n.params.begin(); it != n.params.end(); ++it)
    if (it->local == local) {
      n.params.erase(it);
      return;
    }
}

// Sets (creating if absent) a parameter, keeping the layer's declaration order.
BIASLAB_COLD void set_param(LayerNode& n, const std::string& local, ParamRole role, const Mat& value) {
  if (Param* p = n.find(local)) {
    p->value = value;
    return;
  }
  // Declaration order from declare_params: re-declare and keep existing values.
  std::vector<Param> fresh = declare_params(n.cfg, n.in_width, n.out_width, 0, "");
  std::vector<Param> merged;
  for (auto& f : fresh) {
    if (f.local == local) merged.push_back({local, role, value});
    else if (const Param* old = n.find(f.local)) merged.push_back(*old);
  }
  n.params = std::move(merged);
}

Vec col(const LayerNode& n, const std::string& local) {
  const Param* p = n.find(local);
  return p ? Vec(p->value.col(0)) : Vec();
}

// --- norm affine into the following projection(s) -------------------------------------------
// LN(x; g, b) -> Linear(W, c)  ==  LN(x) -> Linear(W diag(g), W b + c); likewise RMSNorm (no b)
// and the q/k/v projections of a following attention.
bool match_norm_affine(const Seq& s, int i, LayerType norm) {
  if (!is(s, i, norm) || !s[i].cfg.elementwise_affine || s[i].params.empty()) return false;
  return is(s, i + 1, LayerType::linear) || is(s, i + 1, LayerType::attention);
}

BIASLAB_COLD void apply_norm_affine(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& nrm = s[i];
  LayerNode& nxt = s[i + 1];
  const Vec g = col(nrm, "weight");
  const Vec beta = col(nrm, "bias");
  const std::string nn = name_of(prefix, i), xn = name_of(prefix, i + 1);
  out.layers = {nn, xn};
  auto fold_into = [&](const std::string& proj) {
    Param* w = nxt.find(proj + "weight");
    const Mat W = w->value;
    w->value = W * g.asDiagonal();
    if (beta.size()) {
      Vec b = W * beta;
      if (const Param* c = nxt.find(proj + "bias")) b += c->value.col(0);
      if (nxt.cfg.type == LayerType::linear) nxt.cfg.bias = true;
      else if (proj == "q_proj.") nxt.cfg.q_bias = true;
      else if (proj == "k_proj.") nxt.cfg.k_bias = true;
      else if (proj == "v_proj.") nxt.cfg.v_bias = true;
      set_param(nxt, proj + "bias", ParamRole::bias, b);
    }
  };
  std::vector<std::string> projs = nxt.cfg.type == LayerType::linear
                                       ? std::vector<std::string>{""}
                                       : std::vector<std::string>{"q_proj.", "k_proj.", "v_proj."};
  for (const auto& p : projs) fold_into(p);
  // Into a Linear: its weight and bias; into attention: the q, k and v projections alike.
  for (const auto& p : projs) out.moves.push_back({param_name(nn, "weight"), param_name(xn, p + "weight")});
  if (beta.size())
    for (const auto& p : projs) out.moves.push_back({param_name(nn, "bias"), param_name(xn, p + "bias")});
  out.dof_removed = static_cast<int>(g.size() + beta.size());
  nrm.cfg.elementwise_affine = false;
  nrm.params.clear();
}

// --- Linear + BatchNorm(eval) ------------------------------------------------------------------
// BN_eval(z) = s (z - mu) + beta with s = gamma / sqrt(var + eps).
BIASLAB_COLD void bn_scale_shift(const LayerNode& bn, Vec& s, Vec& t) {
  const Vec mu = col(bn, "running_mean"), var = col(bn, "running_var");
  const Vec g = bn.find("weight") ? col(bn, "weight") : Vec::Ones(mu.size());
  const Vec beta = bn.find("bias") ? col(bn, "bias") : Vec::Zero(mu.size());
  s = g.array() / (var.array() + bn.cfg.eps).sqrt();
  t = beta - s.cwiseProduct(mu);  // BN_eval(z) = s z + t
}

bool match_linear_bn(const Seq& s, int i) {
  return is(s, i, LayerType::linear) && is_bn(s, i + 1, BatchNormMode::eval);
}
BIASLAB_COLD void apply_linear_bn(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  Vec sc, t;
  bn_scale_shift(s[i + 1], sc, t);
  LayerNode& lin = s[i];
  const Vec b = lin.find("bias") ? col(lin, "bias") : Vec::Zero(sc.size());
  Param* w = lin.find("weight");
  w->value = sc.asDiagonal() * w->value;
  lin.cfg.bias = true;
  set_param(lin, "bias", ParamRole::bias, sc.cwiseProduct(b) + t);
  const std::string ln = name_of(prefix, i), bn = name_of(prefix, i + 1);
  out.layers = {ln, bn};
  for (const auto& p : s[i + 1].params)
    if (p.role != ParamRole::buffer) out.moves.push_back({param_name(bn, p.local), param_name(ln, p.local == "weight" ? "weight" : "bias")});
  out.dof_removed = s[i + 1].cfg.affine ? 2 * static_cast<int>(sc.size()) : 0;
  s.erase(s.begin() + i + 1);
}

bool match_bn_linear(const Seq& s, int i) {
  return is_bn(s, i, BatchNormMode::eval) && is(s, i + 1, LayerType::linear);
}
BIASLAB_COLD void apply_bn_linear(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  Vec sc, t;
  bn_scale_shift(s[i], sc, t);
  LayerNode& lin = s[i + 1];
  const Mat W = lin.find("weight")->value;
  Vec b = W * t;
  if (lin.find("bias")) b += col(lin, "bias");
  lin.find("weight")->value = W * sc.asDiagonal();
  lin.cfg.bias = true;
  set_param(lin, "bias", ParamRole::bias, b);
  const std::string bn = name_of(prefix, i), ln = name_of(prefix, i + 1);
  out.layers = {bn, ln};
  for (const auto& p : s[i].params)
    if (p.role != ParamRole::buffer) out.moves.push_back({param_name(bn, p.local), param_name(ln, p.local == "weight" ? "weight" : "bias")});
  out.dof_removed = s[i].cfg.affine ? 2 * static_cast<int>(sc.size()) : 0;
  s.erase(s.begin() + i);
}

// --- attention biases ------------------------------------------------------------------------
bool match_key_bias(const Seq& s, int i) {
  return is(s, i, LayerType::attention) && s[i].cfg.k_bias && !s[i].cfg.rope;
}
BIASLAB_COLD void apply_key_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  const std::string n = name_of(prefix, i);
  out.layers = {n};
  out.moves.push_back({n + ".k_proj.bias", ""});
  out.dof_removed = s[i].in_width;
  s[i].cfg.k_bias = false;
  remove_param(s[i], "k_proj.bias");
}

// softmax rows sum to 1, so P (1 b_V^T) = 1 b_V^T: the value bias adds W_O b_V to every token.
bool match_value_bias(const Seq& s, int i) { return is(s, i, LayerType::attention) && s[i].cfg.v_bias; }
BIASLAB_COLD void apply_value_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& a = s[i];
  const Vec bv = col(a, "v_proj.bias");
  Vec bo = a.find("o_proj.weight")->value * bv;
  if (a.find("o_proj.bias")) bo += col(a, "o_proj.bias");
  a.cfg.v_bias = false;
  remove_param(a, "v_proj.bias");
  a.cfg.o_bias = true;
  set_param(a, "o_proj.bias", ParamRole::bias, bo);
  const std::string n = name_of(prefix, i);
  out.layers = {n};
  out.moves.push_back({n + ".v_proj.bias", n + ".o_proj.bias"});
  out.dof_removed = static_cast<int>(bv.size());
}

// --- biases in front of a normalisation ------------------------------------------------------
// The bias-like parameter whose value is added directly to the input of s[i+1]: the last
// layer's bias (through residual adds, which pass it on unchanged).
struct Feeder {
  LayerNode* node = nullptr;
  std::string local, name;
};
BIASLAB_COLD Feeder feeder(Seq& s, int i, const std::string& prefix) {
  if (i < 0 || i >= static_cast<int>(s.size())) return {};
  LayerNode& n = s[i];
  const std::string nm = name_of(prefix, i);
  switch (n.cfg.type) {
    case LayerType::linear:
      return n.find("bias") ? Feeder{&n, "bias", param_name(nm, "bias")} : Feeder{};
    case LayerType::attention:
      return n.find("o_proj.bias") ? Feeder{&n, "o_proj.bias", param_name(nm, "o_proj.bias")} : Feeder{};
    case LayerType::layernorm:
    case LayerType::batchnorm:
    case LayerType::groupnorm:
    case LayerType::instancenorm:
      return n.find("bias") ? Feeder{&n, "bias", param_name(nm, "bias")} : Feeder{};
    case LayerType::residual:
      return feeder(n.body, static_cast<int>(n.body.size()) - 1, body_prefix(nm));
    default:
      return {};
  }
}
Feeder feeder_c(const Seq& s, int i) { return feeder(const_cast<Seq&>(s), i, ""); }

bool absorbs_all(const Seq& s, int j) {
  return is_bn(s, j, BatchNormMode::train) || is(s, j, LayerType::instancenorm);
}

bool match_drop_before_norm(const Seq& s, int i) {
  return absorbs_all(s, i + 1) && feeder_c(s, i).node != nullptr;
}
BIASLAB_COLD void apply_drop_before_norm(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  Feeder f = feeder(s, i, prefix);
  out.layers = {name_of(prefix, i), name_of(prefix, i + 1)};
  out.moves.push_back({f.name, ""});
  out.dof_removed = static_cast<int>(f.node->find(f.local)->value.size());
  LayerNode& n = *f.node;
  // Remove through the config where a flag exists; a BN/GN/IN shift is tied to its gain by
  // `affine`, so it is set to zero instead.
  if (n.cfg.type == LayerType::linear) n.cfg.bias = false;
  else if (n.cfg.type == LayerType::attention) n.cfg.o_bias = false;
  else if (n.cfg.type == LayerType::layernorm) n.cfg.bias = false;
  else {
    n.find(f.local)->value.setZero();
    return;
  }
  remove_param(n, f.local);
}

// Centring: LayerNorm and softmax cancel the mean of a bias, GroupNorm each group's mean.
int centre_groups(const Seq& s, int j) {
  if (is(s, j, LayerType::layernorm) || is(s, j, LayerType::softmax)) return 1;
  if (is(s, j, LayerType::groupnorm)) return s[j].cfg.num_groups;
  return 0;
}
bool match_centre_before_norm(const Seq& s, int i) {
  return centre_groups(s, i + 1) > 0 && feeder_c(s, i).node != nullptr;
}
BIASLAB_COLD void apply_centre_before_norm(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  const int G = centre_groups(s, i + 1);
  Feeder f = feeder(s, i, prefix);
  Mat& b = f.node->find(f.local)->value;
  const int n = static_cast<int>(b.rows()), per = n / G;
  for (int g = 0; g < G; ++g) b.middleRows(g * per, per).array() -= b.middleRows(g * per, per).mean();
  out.layers = {name_of(prefix, i), name_of(prefix, i + 1)};
  out.moves.push_back({f.name, f.name});
  out.dof_removed = G;
}

// --- Linear -> Linear ------------------------------------------------------------------------
bool match_linear_linear(const Seq& s, int i) {
  return is(s, i, LayerType::linear) && is(s, i + 1, LayerType::linear);
}
BIASLAB_COLD void apply_linear_linear(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& a = s[i];
  const LayerNode& b = s[i + 1];
  const Mat W1 = a.find("weight")->value, W2 = b.find("weight")->value;
  const bool has_bias = a.find("bias") || b.find("bias");
  Vec bias = Vec::Zero(W2.rows());
  if (a.find("bias")) bias += W2 * col(a, "bias");
  if (b.find("bias")) bias += col(b, "bias");
  const std::string an = name_of(prefix, i), bn = name_of(prefix, i + 1);
  out.layers = {an, bn};
  out.moves.push_back({param_name(bn, "weight"), param_name(an, "weight")});
  if (a.find("bias")) out.moves.push_back({param_name(an, "bias"), param_name(an, "bias")});
  if (b.find("bias")) out.moves.push_back({param_name(bn, "bias"), param_name(an, "bias")});
  const long before = W1.size() + W2.size() + (a.find("bias") ? W1.rows() : 0) + (b.find("bias") ? W2.rows() : 0);
  a.cfg.out_features = static_cast<int>(W2.rows());
  a.cfg.bias = has_bias;
  a.out_width = static_cast<int>(W2.rows());
  a.params.clear();
  a.params.push_back({"weight", ParamRole::weight, W2 * W1});
  if (has_bias) a.params.push_back({"bias", ParamRole::bias, bias});
  out.dof_removed = static_cast<int>(before - (W2.rows() * W1.cols() + (has_bias ? W2.rows() : 0)));
  s.erase(s.begin() + i + 1);
}

// --- LayerNorm -> RMSNorm when its input is mean-zero -------------------------------------------
// If the layer writing into a LayerNorm (without shift) has centred output rows, the LayerNorm
// subtracts nothing and equals an RMSNorm: centre the writer (W' = C W, b' = C b with
// C = I - 11^T/n) and swap the norm.
bool match_ln_to_rms(const Seq& s, int i) {
  if (!is(s, i + 1, LayerType::layernorm)) return false;
  const LayerNode& ln = s[i + 1];
  if (ln.find("bias")) return false;
  return is(s, i, LayerType::linear) || is(s, i, LayerType::attention);
}
BIASLAB_COLD void apply_ln_to_rms(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& w = s[i];
  const std::string proj = w.cfg.type == LayerType::attention ? "o_proj." : "";
  Mat& W = w.find(proj + "weight")->value;
  W.rowwise() -= W.colwise().mean();
  if (Param* b = w.find(proj + "bias")) b->value.array() -= b->value.mean();
  LayerNode& ln = s[i + 1];
  const double eps = ln.cfg.eps;
  const bool affine = ln.cfg.elementwise_affine;
  ln.cfg = make_layer(LayerType::rmsnorm);
  ln.cfg.eps = eps;
  ln.cfg.elementwise_affine = affine;
  out.layers = {name_of(prefix, i), name_of(prefix, i + 1)};
  out.moves.push_back({param_name(name_of(prefix, i), proj + "weight"), param_name(name_of(prefix, i), proj + "weight")});
  out.dof_removed = static_cast<int>(W.cols()) + (w.find(proj + "bias") ? 1 : 0);
}

bool m_ln(const Seq& s, int i) { return match_norm_affine(s, i, LayerType::layernorm); }
bool m_rms(const Seq& s, int i) { return match_norm_affine(s, i, LayerType::rmsnorm); }

}  // namespace

BIASLAB_COLD const std::vector<FoldRule>& fold_rules() {
  static const std::vector<FoldRule> rules = {
      {"fold_layernorm_affine", "LayerNorm gain and shift into the next projection",
       R"(W\,\mathrm{LN}_{\gamma,\beta}(x)+b = (W\operatorname{diag}\gamma)\,\mathrm{LN}(x) + (W\beta+b))",
       true, m_ln, apply_norm_affine},
      {"fold_rmsnorm_gain", "RMSNorm gain into the next projection",
       R"(W\,\mathrm{RMS}_{\gamma}(x)+b = (W\operatorname{diag}\gamma)\,\mathrm{RMS}(x) + b)", true, m_rms,
       apply_norm_affine},
      {"fuse_linear_batchnorm_eval", "Linear then BatchNorm (eval) into one Linear",
       R"(s=\gamma/\sqrt{\sigma^2+\epsilon}:\ W'=\operatorname{diag}(s)W,\ b'=s\odot(b-\mu)+\beta)", true,
       match_linear_bn, apply_linear_bn},
      {"fuse_batchnorm_eval_linear", "BatchNorm (eval) then Linear into one Linear",
       R"(s=\gamma/\sqrt{\sigma^2+\epsilon}:\ W'=W\operatorname{diag}(s),\ b'=W(\beta-s\odot\mu)+b)", true,
       match_bn_linear, apply_bn_linear},
      {"drop_key_bias", "Drop the key bias (softmax is shift invariant)",
       R"(\mathrm{softmax}_j(q_i\cdot(k_j+b_K)) = \mathrm{softmax}_j(q_i\cdot k_j))", true, match_key_bias,
       apply_key_bias},
      {"fold_value_bias", "Value bias into the output bias",
       R"(\textstyle\sum_j P_{ij}=1 \Rightarrow b_O' = b_O + W_O b_V,\ b_V' = 0)", true, match_value_bias,
       apply_value_bias},
      {"drop_bias_before_norm", "Drop a bias that BatchNorm (train) or InstanceNorm subtracts",
       R"(\mathrm{BN}(z+b)=\mathrm{BN}(z))", true, match_drop_before_norm, apply_drop_before_norm},
      {"centre_bias_before_norm", "Centre a bias before LayerNorm, softmax (its mean) or GroupNorm (group means)",
       R"(\mathrm{LN}(z+b)=\mathrm{LN}(z+b-\bar b\,\mathbf 1))", false, match_centre_before_norm,
       apply_centre_before_norm},
      {"merge_linear_linear", "Linear then Linear into one Linear",
       R"(W_2(W_1x+b_1)+b_2=(W_2W_1)x+(W_2b_1+b_2))", true, match_linear_linear, apply_linear_linear},
      {"layernorm_to_rmsnorm", "LayerNorm to RMSNorm after centring the layer that writes into it",
       R"(C=I-\tfrac1n\mathbf 1\mathbf 1^\top:\ \mathrm{LN}(Wx+b)=\mathrm{RMS}(CWx+Cb))", false,
       match_ln_to_rms, apply_ln_to_rms},
  };
  return rules;
}

std::string site_prefix(const FoldSite& site) {
  std::string p = kTopLayers;
  for (int i : site.path) p = body_prefix(layer_name(p, static_cast<size_t>(i)));
  return p;
}

namespace {

BIASLAB_COLD void collect(const Seq& seq, std::vector<int>& path, std::vector<FoldCandidate>& out) {
  for (int i = 0; i < static_cast<int>(seq.size()); ++i) {
    for (const FoldRule& r : fold_rules())
      if (r.match(seq, i)) out.push_back({&r, {path, i}});
    if (seq[i].cfg.type == LayerType::residual) {
      path.push_back(i);
      collect(seq[i].body, path, out);
      path.pop_back();
    }
  }
}

}  // namespace

BIASLAB_COLD std::vector<FoldCandidate> find_folds(const Network& net) {
  std::vector<FoldCandidate> out;
  std::vector<int> path;
  collect(net.layers, path, out);
  return out;
}

BIASLAB_COLD Network apply_fold(const Network& net, const FoldCandidate& c, FoldApplied& out) {
  Network copy = net;
  Seq* seq = &copy.layers;
  for (int i : c.site.path) seq = &(*seq)[i].body;
  out = FoldApplied{};
  out.rule = c.rule->id;
  c.rule->apply(*seq, c.site.index, site_prefix(c.site), out);
  sync_network(copy);
  return copy;
}

}  // namespace biaslab
