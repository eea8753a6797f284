#!/usr/bin/env python3
"""How stable are EpiCache's episodes on a LoCoMo conversation, by k-means' own noise?

    OMP_NUM_THREADS=1 scripts/epicache_episode_noise.py [CONV.json]   (default conv-26; ~3 min)

The epicache policy clusters a conversation's 4-utterance segments (MiniLM embeddings) into E = 4
episodes with k-means++ and 10 restarts, and routes each question to the nearest centroid. This
re-does that independently in numpy (MiniLM's forward pass checked against the repository's
sentence-transformers goldens; one utterance per LoCoMo turn, "Speaker: text [shares caption]",
no session headers; numpy's random generator instead of splitmix64) and prints:
  - the adjusted Rand index (ARI) between the question routings of clusterings that differ only
    in the seed (20 seeds, then 100 for percentiles), and with n_init 1 and 50;
  - the same between a clustering of the first 97% / 50% of the segments and of all of them;
  - how separated the topics are: silhouette, within/between-centroid distances, variance
    explained, against the same data with each dimension shuffled;
  - the routing's sensitivity to float-level noise in the embeddings.
An online agent's episodes can agree with the offline build's no better than two seeds agree.
Uses the venv's numpy and tokenizers; reads model.safetensors by hand."""
import json, os, struct, sys, time, itertools
import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from locomo_paired import adjusted_rand_index  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.environ.get("KVMEM_HOME", os.path.expanduser("~/.cache/kvmem"))
MODEL = os.path.join(HOME, "models", "all-MiniLM-L6-v2")
CONV = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/data/locomo/conv-26.json"
GOLD = os.path.join(ROOT, "tests", "data", "embed")
E, N_INIT, WINDOW, N_SEEDS = 4, 10, 4, 20


# ---------------------------------------------------------------- MiniLM (numpy, float32)
def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        buf = f.read()
    dt = {"F32": np.float32, "I64": np.int64, "F16": np.float16}
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(buf[a:b], dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out


class MiniLM:
    def __init__(self, d):
        self.w = {k: (v.astype(np.float32) if v.dtype != np.int64 else v)
                  for k, v in load_safetensors(os.path.join(d, "model.safetensors")).items()}
        self.tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(256)
        self.L = 1 + max(int(k.split(".")[2]) for k in self.w if k.startswith("encoder.layer."))

    @staticmethod
    def ln(x, g, b, eps=1e-12):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * g + b

    @staticmethod
    def gelu(x):
        from math import sqrt
        # exact erf GELU
        return 0.5 * x * (1.0 + erf(x / np.float32(sqrt(2.0))))

    def embed_ids(self, ids):
        w = self.w
        ids = np.asarray(ids)
        n = len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self.ln(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        H, dh = 12, 32
        for l in range(self.L):
            p = "encoder.layer.%d." % l
            lin = lambda t, name: t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            q = lin(x, "attention.self.query").reshape(n, H, dh).transpose(1, 0, 2)
            k = lin(x, "attention.self.key").reshape(n, H, dh).transpose(1, 0, 2)
            v = lin(x, "attention.self.value").reshape(n, H, dh).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(dh))
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, H * dh)
            x = self.ln(x + lin(a, "attention.output.dense"),
                        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
            h = self.gelu(lin(x, "intermediate.dense"))
            x = self.ln(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        e = x.mean(0)
        return e / max(np.linalg.norm(e), 1e-12)

    def embed(self, texts):
        return np.stack([self.embed_ids(self.tok.encode(t).ids) for t in texts]).astype(np.float32)


def erf(x):
    # Abramowitz & Stegun 7.1.26 (|err| < 1.5e-7), float64 then back
    x = x.astype(np.float64)
    sg = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (sg * y).astype(np.float32)


# ---------------------------------------------------------------- data
def one_line(s):
    return " ".join(s.split())


def load():
    d = json.load(open(CONV))
    c = d.get("conversation", d)
    sess = sorted((int(k.split("_")[1]), v) for k, v in c.items()
                  if k.startswith("session_") and k.count("_") == 1 and isinstance(v, list) and v)
    utts = []
    for _, turns in sess:
        for t in turns:
            s = one_line(t["text"])
            if t.get("blip_caption"):
                s += " [shares " + one_line(t["blip_caption"]) + "]"
            utts.append(one_line(t["speaker"]) + ": " + s)
    segs = ["\n".join(utts[i:i + WINDOW]) for i in range(0, len(utts), WINDOW)]
    qs = [q["question"] for q in d["qa"] if q.get("category") != 5]
    return utts, segs, qs


# ---------------------------------------------------------------- k-means (kvmem-style)
def kmeans_once(X, k, rng, max_iter=300):
    n = len(X)
    c = [rng.integers(n)]
    d2 = ((X - X[c[0]]) ** 2).sum(1)
    for _ in range(1, k):
        tot = d2.sum()
        if tot <= 0:
            rest = [i for i in range(n) if i not in c]
            j = rest[rng.integers(len(rest))]
        else:
            j = int(np.searchsorted(np.cumsum(d2), rng.random() * tot, side="right"))
            j = min(j, n - 1)
        c.append(j)
        d2 = np.minimum(d2, ((X - X[j]) ** 2).sum(1))
    C = X[c].astype(np.float64)
    lab = None
    for _ in range(max_iter):
        D = ((X[:, None, :] - C[None]) ** 2).sum(-1)
        new = D.argmin(1)
        if lab is not None:  # move only to a strictly nearer centroid
            keep = D[np.arange(n), lab] <= D[np.arange(n), new]
            new = np.where(keep, lab, new)
        for e in range(k):  # re-seed empties from the farthest point of a cluster of >= 2
            if not (new == e).any():
                dist = D[np.arange(n), new].copy()
                cnt = np.bincount(new, minlength=k)
                dist[cnt[new] < 2] = -1
                j = int(dist.argmax())
                new[j] = e
        if lab is not None and (new == lab).all():
            break
        lab = new
        C = np.stack([X[lab == e].mean(0) for e in range(k)])
    C = np.stack([X[lab == e].mean(0) for e in range(k)])
    inertia = ((X - C[lab]) ** 2).sum()
    return lab, C, inertia


def kmeans(X, k, seed, n_init=N_INIT):
    X = X.astype(np.float64)
    rng = np.random.default_rng(seed)
    best = None
    for _ in range(n_init):
        r = kmeans_once(X, k, rng)
        if best is None or r[2] < best[2]:
            best = r
    return best


def route(C, Q):
    Cn = C / np.linalg.norm(C, axis=1, keepdims=True)
    return (Q @ Cn.T).argmax(1)


# ---------------------------------------------------------------- metrics
def ari(a, b):
    return adjusted_rand_index(list(np.asarray(a)), list(np.asarray(b)))


def silhouette(X, lab):
    D = np.sqrt(np.maximum(((X[:, None] - X[None]) ** 2).sum(-1), 0))
    ks = np.unique(lab)
    s = np.zeros(len(X))
    for i in range(len(X)):
        own = lab == lab[i]
        if own.sum() <= 1:
            continue
        a = D[i, own].sum() / (own.sum() - 1)
        b = min(D[i, lab == e].mean() for e in ks if e != lab[i])
        s[i] = (b - a) / max(a, b)
    return s.mean()


def separation(X, lab, C):
    """within: mean distance of a point to its own centroid; between: mean distance between
    centroids; also the fraction of total variance explained by the clustering (1 - W/T)."""
    within = np.linalg.norm(X - C[lab], axis=1).mean()
    k = len(C)
    between = np.mean([np.linalg.norm(C[i] - C[j]) for i in range(k) for j in range(i + 1, k)])
    T = ((X - X.mean(0)) ** 2).sum()
    W = ((X - C[lab]) ** 2).sum()
    return within, between, 1 - W / T


def stats(v):
    v = np.asarray(v)
    return "%.3f [%.3f, %.3f] (n=%d)" % (v.mean(), v.min(), v.max(), len(v))


# ---------------------------------------------------------------- main
def main():
    t0 = time.time()
    utts, segs, qs = load()
    print("utterances %d, segments %d, questions (cat!=5) %d" % (len(utts), len(segs), len(qs)))
    if True:
        m = MiniLM(MODEL)
        # check against sentence-transformers goldens
        gold = json.load(open(os.path.join(GOLD, "minilm_embed.json")))
        G = np.fromfile(os.path.join(GOLD, gold["embeddings"]), dtype="<f4").reshape(-1, gold["dim"])
        texts = [c["text"] for c in gold["cases"]]
        mine = m.embed(texts)
        print("golden check: max |diff| %.2e, min cos %.6f" % (
            np.abs(mine - G).max(), (mine * G).sum(1).min()))
        S = m.embed(segs)
        Q = m.embed(qs)
        ntok = [len(m.tok.encode(s).ids) for s in segs]
        print("segment tokens: mean %.0f max %d (truncated at 256: %d)" % (
            np.mean(ntok), max(ntok), sum(t >= 256 for t in ntok)))
    print("embedded in %.0fs" % (time.time() - t0))
    S64 = S.astype(np.float64)
    Q64 = Q.astype(np.float64)
    n = len(S)
    seeds = list(range(N_SEEDS))

    full = {s: kmeans(S64, E, s) for s in seeds}
    routes = {s: route(full[s][1], Q64) for s in seeds}
    inert = np.array([full[s][2] for s in seeds])
    print("\n== full (%d segments), %d seeds, n_init=%d" % (n, N_SEEDS, N_INIT))
    print("inertia: min %.4f max %.4f, distinct optima (rounded 1e-6): %d" % (
        inert.min(), inert.max(), len(np.unique(np.round(inert, 6)))))
    pairs = list(itertools.combinations(seeds, 2))
    print("pairwise ARI segment assignments :", stats([ari(full[a][0], full[b][0]) for a, b in pairs]))
    print("pairwise ARI question routings   :", stats([ari(routes[a], routes[b]) for a, b in pairs]))
    sizes = [sorted(np.bincount(full[s][0], minlength=E).tolist()) for s in seeds]
    print("cluster sizes per seed:", sizes[:5], "...")
    qsz = [sorted(np.bincount(routes[s], minlength=E).tolist()) for s in seeds]
    print("question-routing sizes per seed:", qsz[:5], "...")

    # single restart (n_init=1) for reference: how noisy is one k-means run
    one = {s: kmeans(S64, E, 1000 + s, n_init=1) for s in seeds}
    r1 = {s: route(one[s][1], Q64) for s in seeds}
    print("n_init=1 pairwise ARI seg / route:", stats([ari(one[a][0], one[b][0]) for a, b in pairs]),
          "/", stats([ari(r1[a], r1[b]) for a, b in pairs]))

    for frac in (0.97, 0.50):
        m_ = int(round(frac * n))
        part = {s: kmeans(S64[:m_], E, s) for s in seeds}
        pr = {s: route(part[s][1], Q64) for s in seeds}
        print("\n== first %.0f%% (%d segments)" % (frac * 100, m_))
        print("same seed  ARI routing vs full   :", stats([ari(pr[s], routes[s]) for s in seeds]))
        print("same seed  ARI segments vs full  :", stats([ari(part[s][0], full[s][0][:m_]) for s in seeds]))
        cross = [(a, b) for a in seeds for b in seeds if a != b]
        print("cross seed ARI routing vs full   :", stats([ari(pr[a], routes[b]) for a, b in cross]))
        print("cross seed ARI segments vs full  :", stats([ari(part[a][0], full[b][0][:m_]) for a, b in cross]))
        print("pairwise ARI routing within prefix:", stats([ari(pr[a], pr[b]) for a, b in pairs]))

    print("\n== separation (best-inertia full clustering across seeds)")
    b = int(inert.argmin())
    lab, C, _ = full[b]
    w, btw, r2 = separation(S64, lab, C)
    print("E=4 silhouette (euclid on unit vecs) %.3f; mean dist to own centroid %.3f, mean "
          "centroid-centroid dist %.3f, ratio %.2f; variance explained 1-W/T %.3f" % (
              silhouette(S64, lab), w, btw, w / btw, r2))
    # null: same data with each dimension independently permuted across segments (kills structure)
    rng = np.random.default_rng(7)
    nulls = []
    for rep in range(5):
        P = np.stack([rng.permutation(S64[:, j]) for j in range(S64.shape[1])], 1)
        P /= np.linalg.norm(P, axis=1, keepdims=True)
        l2, c2_, _ = kmeans(P, E, rep)
        nulls.append((silhouette(P, l2), separation(P, l2, c2_)[2]))
    nulls = np.array(nulls)
    print("null (dims permuted, renormalized): silhouette %.3f, var explained %.3f" % tuple(nulls.mean(0)))
    for k in (2, 3, 5, 6, 8):
        l2, c2_, _ = kmeans(S64, k, 0)
        print("k=%d silhouette %.3f var explained %.3f" % (k, silhouette(S64, l2), separation(S64, l2, c2_)[2]))
    cos = S64 @ S64.T
    iu = np.triu_indices(n, 1)
    print("segment cosine: mean %.3f, sd %.3f; adjacent-segment mean %.3f" % (
        cos[iu].mean(), cos[iu].std(), np.mean([cos[i, i + 1] for i in range(n - 1)])))
    # how confident are question routings: margin between top-2 centroid cosines
    Cn = C / np.linalg.norm(C, axis=1, keepdims=True)
    sc = np.sort(Q64 @ Cn.T, 1)
    print("question routing margin (top1 - top2 cosine): median %.4f, frac < 0.01: %.2f, top1 median %.3f" % (
        np.median(sc[:, -1] - sc[:, -2]), np.mean(sc[:, -1] - sc[:, -2] < 0.01), np.median(sc[:, -1])))
    print("contiguity: fraction of adjacent segments in same episode %.2f" % np.mean(lab[1:] == lab[:-1]))
    tails(S64, Q64)
    print("\ntotal %.0fs" % (time.time() - t0))


def tails(S, Q):
    """Percentiles over 100 seeds, float-level noise, and n_init 50."""
    n = len(S)
    m = int(round(0.97 * n))
    seeds = range(100)
    rf = {s: route(kmeans(S, E, s)[1], Q) for s in seeds}
    rp = {s: route(kmeans(S[:m], E, s)[1], Q) for s in seeds}

    def rep(name, v):
        v = np.array(v)
        q = np.percentile(v, [5, 25, 50, 75, 95])
        print("%-40s mean %.3f  p5/25/50/75/95 %s  P(ARI<=0.38) %.2f" % (
            name, v.mean(), np.round(q, 3), np.mean(v <= 0.38)))

    print("\n== 100 seeds")
    pairs = list(itertools.combinations(seeds, 2))
    rep("full vs full, routing", [ari(rf[a], rf[b]) for a, b in pairs])
    rep("97% vs full same seed, routing", [ari(rp[s], rf[s]) for s in seeds])
    rep("97% vs full cross seed, routing", [ari(rp[a], rf[b]) for a in seeds for b in seeds if a != b])
    rng = np.random.default_rng(3)
    for eps in (1e-6, 1e-4):
        Sp = S + rng.normal(0, eps, S.shape)
        Sp /= np.linalg.norm(Sp, axis=1, keepdims=True)
        v = [ari(route(kmeans(Sp, E, s)[1], Q), rf[s]) for s in range(30)]
        print("noise eps=%g same seed routing ARI: mean %.3f min %.3f frac==1 %.2f" % (
            eps, np.mean(v), np.min(v), np.mean(np.isclose(v, 1))))
    f50 = {s: kmeans(S, E, s, n_init=50) for s in range(20)}
    r50 = {s: route(f50[s][1], Q) for s in range(20)}
    v = [ari(r50[a], r50[b]) for a, b in itertools.combinations(range(20), 2)]
    print("n_init=50: pairwise routing ARI mean %.3f min %.3f" % (np.mean(v), np.min(v)))


if __name__ == "__main__":
    main()
