//! The KompicsMessaging ratio learner, kept as the baseline.
//!
//! Kroll, Ormenişan, Dowling, "Fast and Flexible Networking for
//! Message-oriented Middleware", ICDCS 2017, section IV-C: on-policy
//! Sarsa(λ) (Sutton and Barto, figure 7.11) with replacing traces over a
//! discretised ratio, with the two refinements the paper ends with:
//!
//! - **model-based values** (IV-C4): the state is the ratio itself on a
//!   lattice of step `1 / steps` (the paper's `κ = 1/5` on `r ∈ [-1, 1]`
//!   is `steps = 10` shares), an action moves one or two steps of share
//!   from one candidate to another (or stays), and the model `M(s, a)`
//!   clamps at the edges, so `Q(s, a) = V(M(s, a))` and only `V` is
//!   learned;
//! - **value function approximation** (IV-C5): a state not visited yet is
//!   valued by a least-squares quadratic through the visited ones (the
//!   paper's assumption of one quadratic maximum), as soon as two are;
//!   a state's value starts from that estimate when it is first visited
//!   (the paper leaves the initial value "arbitrary"; starting from zero
//!   halves a new state's first value at α = 0.5 and keeps the learner on
//!   states it knows, which made this baseline weaker still).
//!
//! An episode lasts `episode` (the paper's 1 s); its reward is the lane's
//! total goodput over the episode, in units of the first non-zero
//! episode's goodput (the paper uses "throughput and latency statistics"
//! without a formula; goodput is the objective the paper plots). The
//! policy is ε-greedy, ε decaying from `epsilon_max` by `epsilon_decay`
//! per episode to `epsilon_min`, with the paper's parameters as defaults
//! (α = 0.5, γ = 0.5, λ = 0.85, ε 0.3 → 0.1 by 0.01). For two candidates
//! this is the paper's learner exactly; for more, the lattice is the
//! simplex of shares in the same steps.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::learner::{ConfigError, RatioLearner, Sample};

/// Settings of a [`TdLambda`]; the defaults are the paper's.
#[derive(Debug, Clone, PartialEq)]
pub struct TdLambdaConfig {
    /// Lattice steps of the whole share: 10 (shares in tenths).
    pub steps: u32,
    /// Largest move of an action, in steps: 2.
    pub max_move: u32,
    /// Episode length: 1 s.
    pub episode: Duration,
    /// Step size α: 0.5.
    pub alpha: f64,
    /// Discount γ: 0.5.
    pub gamma: f64,
    /// Trace decay λ: 0.85.
    pub lambda: f64,
    /// Initial exploration ε: 0.3.
    pub epsilon_max: f64,
    /// Final exploration ε: 0.1.
    pub epsilon_min: f64,
    /// ε decrease per episode: 0.01.
    pub epsilon_decay: f64,
    /// Value unvisited states by a quadratic fit (IV-C5): true.
    pub approximate: bool,
    /// Seed of the exploration: 0.
    pub seed: u64,
}

impl Default for TdLambdaConfig {
    fn default() -> Self {
        Self {
            steps: 10,
            max_move: 2,
            episode: Duration::from_secs(1),
            alpha: 0.5,
            gamma: 0.5,
            lambda: 0.85,
            epsilon_max: 0.3,
            epsilon_min: 0.1,
            epsilon_decay: 0.01,
            approximate: true,
            seed: 0,
        }
    }
}

/// An action: move `amount` steps of share from `from` to `to`.
#[derive(Debug, Clone, Copy)]
struct Move {
    from: usize,
    to: usize,
    amount: u32,
}

/// The paper's Sarsa(λ) ratio learner (see the module docs).
#[derive(Debug, Clone)]
pub struct TdLambda {
    config: TdLambdaConfig,
    /// Every lattice point: shares in steps, summing to `steps`.
    states: Vec<Vec<u32>>,
    index: HashMap<Vec<u32>, usize>,
    /// Stay, then every move.
    actions: Vec<Option<Move>>,
    value: Vec<f64>,
    visited: Vec<bool>,
    trace: Vec<f64>,
    /// The state being run this episode.
    current: usize,
    episode_start: Instant,
    episode_bytes: u64,
    reward_unit: Option<f64>,
    epsilon: f64,
    rng: SplitMix64,
    ratio: Vec<f64>,
}

impl TdLambda {
    /// Largest number of candidates (the lattice grows as
    /// `steps^(candidates-1)`).
    pub const MAX_CANDIDATES: usize = 6;

    /// A learner for `candidates` candidates created at `now`, starting at
    /// the even split (the lattice point nearest to it).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for fewer than two or more than
    /// [`MAX_CANDIDATES`](Self::MAX_CANDIDATES) candidates, or a parameter
    /// out of range.
    pub fn new(
        now: Instant,
        candidates: usize,
        config: TdLambdaConfig,
    ) -> Result<Self, ConfigError> {
        if candidates < 2 {
            return Err(ConfigError::TooFewCandidates { candidates });
        }
        if candidates > Self::MAX_CANDIDATES {
            return Err(ConfigError::TooManyCandidates {
                candidates,
                max: Self::MAX_CANDIDATES,
            });
        }
        let c = &config;
        for (name, value, ok) in [
            ("steps", f64::from(c.steps), (1..=100).contains(&c.steps)),
            ("max_move", f64::from(c.max_move), c.max_move >= 1),
            ("alpha", c.alpha, c.alpha > 0.0),
            ("gamma", c.gamma, (0.0..=1.0).contains(&c.gamma)),
            ("lambda", c.lambda, (0.0..=1.0).contains(&c.lambda)),
            (
                "epsilon_max",
                c.epsilon_max,
                (0.0..=1.0).contains(&c.epsilon_max),
            ),
            (
                "epsilon_min",
                c.epsilon_min,
                (0.0..=c.epsilon_max).contains(&c.epsilon_min),
            ),
            ("epsilon_decay", c.epsilon_decay, c.epsilon_decay >= 0.0),
            ("episode", c.episode.as_secs_f64(), !c.episode.is_zero()),
        ] {
            if !ok {
                return Err(ConfigError::OutOfRange { name, value });
            }
        }
        let mut states = Vec::new();
        compositions(c.steps, candidates, &mut Vec::new(), &mut states);
        let index = states
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, s)| (s, i))
            .collect();
        let mut actions = vec![None];
        for from in 0..candidates {
            for to in (0..candidates).filter(|&t| t != from) {
                for amount in 1..=c.max_move {
                    actions.push(Some(Move { from, to, amount }));
                }
            }
        }
        let mut start = vec![c.steps / candidates as u32; candidates];
        for s in start
            .iter_mut()
            .take((c.steps % candidates as u32) as usize)
        {
            *s += 1;
        }
        let mut me = Self {
            value: vec![0.0; states.len()],
            visited: vec![false; states.len()],
            trace: vec![0.0; states.len()],
            states,
            index,
            actions,
            current: 0,
            episode_start: now,
            episode_bytes: 0,
            reward_unit: None,
            epsilon: config.epsilon_max,
            rng: SplitMix64(config.seed),
            ratio: Vec::new(),
            config,
        };
        me.current = me.index[&start];
        me.ratio = me.shares(me.current);
        Ok(me)
    }

    /// The current exploration probability ε.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    fn shares(&self, state: usize) -> Vec<f64> {
        let steps = f64::from(self.config.steps);
        self.states[state]
            .iter()
            .map(|&s| f64::from(s) / steps)
            .collect()
    }

    /// The model `M(s, a)`: the state an action leads to, clamped.
    fn model(&self, state: usize, action: Option<Move>) -> usize {
        let Some(m) = action else { return state };
        let mut next = self.states[state].clone();
        let amount = m.amount.min(next[m.from]);
        next[m.from] -= amount;
        next[m.to] += amount;
        self.index[&next]
    }

    /// One Sarsa(λ) step at the end of an episode with reward `reward`.
    fn step(&mut self, reward: f64) {
        let s = self.current;
        if !self.visited[s] {
            // "Initialize Q(s, a) arbitrarily": from the fitted trend when
            // there is one (IV-C5), so a state's first value is not pulled
            // halfway from zero.
            self.value[s] = self.estimate(s).unwrap_or(0.0);
            self.visited[s] = true;
        }
        let action = self.policy(s);
        let next = self.model(s, action);
        // Q(s, a) = V(M(s, a)): the value of the state run this episode.
        let delta = reward + self.config.gamma * self.estimate(next).unwrap_or(0.0) - self.value[s];
        // Replacing trace (the paper's choice over accumulating traces).
        self.trace[s] = 1.0;
        let decay = self.config.gamma * self.config.lambda;
        for (v, e) in self.value.iter_mut().zip(self.trace.iter_mut()) {
            *v += self.config.alpha * delta * *e;
            *e *= decay;
        }
        self.current = next;
        self.ratio = self.shares(next);
        self.epsilon = (self.epsilon - self.config.epsilon_decay).max(self.config.epsilon_min);
    }

    /// ε-greedy over the actions from `state`; random while a value is
    /// unknown (the paper: "it makes a random decision if the value is
    /// uninitialised").
    fn policy(&mut self, state: usize) -> Option<Move> {
        let random = self.rng.unit() < self.epsilon;
        let fit = if self.config.approximate {
            self.fit()
        } else {
            None
        };
        let mut best: Option<(f64, Option<Move>)> = None;
        let mut unknown = false;
        for &a in &self.actions {
            let next = self.model(state, a);
            let v = if self.visited[next] {
                Some(self.value[next])
            } else {
                fit.as_ref().map(|f| f.eval(&self.shares(next)))
            };
            match v {
                None => unknown = true,
                Some(v) if best.is_none_or(|(b, _)| v > b) => best = Some((v, a)),
                Some(_) => {}
            }
        }
        if random || unknown || best.is_none() {
            let i = (self.rng.next() % self.actions.len() as u64) as usize;
            return self.actions[i];
        }
        // `best` is Some: checked just above.
        best.map(|(_, a)| a).unwrap_or(None)
    }

    /// The learned value, or the fitted one for an unvisited state.
    fn estimate(&self, state: usize) -> Option<f64> {
        if self.visited[state] {
            return Some(self.value[state]);
        }
        if !self.config.approximate {
            return None;
        }
        self.fit().map(|f| f.eval(&self.shares(state)))
    }

    /// Least-squares quadratic through the visited states, once there are
    /// two of them.
    fn fit(&self) -> Option<Quadratic> {
        let points: Vec<(Vec<f64>, f64)> = (0..self.states.len())
            .filter(|&i| self.visited[i])
            .map(|i| (self.shares(i), self.value[i]))
            .collect();
        if points.len() < 2 {
            return None;
        }
        Quadratic::fit(&points)
    }
}

impl RatioLearner for TdLambda {
    fn candidates(&self) -> usize {
        self.ratio.len()
    }

    fn on_sample(&mut self, now: Instant, candidate: usize, sample: &Sample) {
        assert!(
            candidate < self.ratio.len(),
            "candidate {candidate} out of range"
        );
        // A sample covers the interval ending at `now`; it belongs to the
        // episode it ends in, and one ending after the episode closes it.
        while now > self.episode_start + self.config.episode {
            let goodput = self.episode_bytes as f64 / self.config.episode.as_secs_f64();
            let unit = *self.reward_unit.get_or_insert(goodput);
            if unit <= 0.0 {
                self.reward_unit = None;
            }
            let reward = if unit > 0.0 { goodput / unit } else { 0.0 };
            self.step(reward);
            self.episode_start += self.config.episode;
            self.episode_bytes = 0;
        }
        self.episode_bytes += sample.bytes_delivered;
    }

    fn ratio(&self) -> &[f64] {
        &self.ratio
    }
}

/// `V(s) ≈ c + Σ b_i s_i + Σ a_i s_i²` over the first `N - 1` shares (the
/// last is one minus their sum).
#[derive(Debug, Clone)]
struct Quadratic(Vec<f64>);

impl Quadratic {
    fn features(shares: &[f64]) -> Vec<f64> {
        let free = &shares[..shares.len() - 1];
        let mut f = vec![1.0];
        f.extend(free.iter().copied());
        f.extend(free.iter().map(|s| s * s));
        f
    }

    fn eval(&self, shares: &[f64]) -> f64 {
        Self::features(shares)
            .iter()
            .zip(&self.0)
            .map(|(f, c)| f * c)
            .sum()
    }

    /// Ridge-regularised normal equations (a tiny ridge makes an
    /// under-determined fit the smallest one through the points).
    fn fit(points: &[(Vec<f64>, f64)]) -> Option<Self> {
        let k = Self::features(&points[0].0).len();
        let mut a = vec![vec![0.0; k + 1]; k];
        for (shares, y) in points {
            let f = Self::features(shares);
            for i in 0..k {
                for j in 0..k {
                    a[i][j] += f[i] * f[j];
                }
                a[i][k] += f[i] * y;
            }
        }
        for (i, row) in a.iter_mut().enumerate().skip(1) {
            row[i] += 1e-6;
        }
        solve(a).map(Self)
    }
}

/// Gaussian elimination with partial pivoting on an augmented matrix.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = a.len();
    for col in 0..k {
        let pivot = (col..k).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let factor = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= factor * p;
                }
            }
        }
    }
    Some((0..k).map(|i| a[i][k] / a[i][i]).collect())
}

/// Every way to split `left` steps among `parts` candidates.
fn compositions(left: u32, parts: usize, prefix: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
    if parts == 1 {
        prefix.push(left);
        out.push(prefix.clone());
        prefix.pop();
        return;
    }
    for s in 0..=left {
        prefix.push(s);
        compositions(left - s, parts - 1, prefix, out);
        prefix.pop();
    }
}

/// The seeded generator of the exploration (SplitMix64).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_candidates_have_the_papers_eleven_states_and_five_actions() {
        let t = TdLambda::new(Instant::now(), 2, TdLambdaConfig::default()).unwrap();
        assert_eq!(t.states.len(), 11);
        assert_eq!(t.actions.len(), 5);
        assert_eq!(t.ratio(), &[0.5, 0.5]);
        // M clamps at the edge: from 100 % / 0 %, moving two more stays.
        let edge = t.index[&vec![10, 0]];
        let push = Some(Move {
            from: 1,
            to: 0,
            amount: 2,
        });
        assert_eq!(t.model(edge, push), edge);
    }

    #[test]
    fn the_quadratic_fit_recovers_a_parabola() {
        let points: Vec<(Vec<f64>, f64)> = [0.1, 0.4, 0.7, 0.9]
            .iter()
            .map(|&x| (vec![x, 1.0 - x], 1.0 - (x - 0.6) * (x - 0.6)))
            .collect();
        let q = Quadratic::fit(&points).unwrap();
        assert!((q.eval(&[0.6, 0.4]) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn episodes_close_on_the_first_sample_after_them() {
        let t0 = Instant::now();
        let mut t = TdLambda::new(t0, 2, TdLambdaConfig::default()).unwrap();
        let s = Sample {
            bytes_delivered: 1000,
            delay: Duration::ZERO,
            backlogged: true,
        };
        for k in 1..=10u32 {
            t.on_sample(t0 + Duration::from_millis(100) * k, 0, &s);
        }
        assert_eq!(t.epsilon(), 0.3);
        t.on_sample(t0 + Duration::from_millis(1100), 0, &s);
        assert!((t.epsilon() - 0.29).abs() < 1e-12);
    }
}
