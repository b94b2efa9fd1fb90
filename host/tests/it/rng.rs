//! Deterministic randomness for the generated tests: a seed from the environment (printed by
//! each test, so a failure can be replayed) and xorshift64*, identical on every platform.

/// xorshift64*; no dependencies.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn pct(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// Up to `max` distinct elements of `xs`, in random order.
    pub fn subset<T: Clone>(&mut self, xs: &[T], max: usize) -> Vec<T> {
        let mut pool: Vec<T> = xs.to_vec();
        let k = self.below(max.min(xs.len()) + 1);
        let mut out = Vec::new();
        for _ in 0..k {
            let i = self.below(pool.len());
            out.push(pool.remove(i));
        }
        out
    }

    /// A fresh record id (15 of `[a-z0-9]`), unique within `used`.
    pub fn id(&mut self, used: &mut std::collections::HashSet<String>) -> String {
        const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        loop {
            let s: String = (0..15).map(|_| *self.pick(ALNUM) as char).collect();
            if used.insert(s.clone()) {
                return s;
            }
        }
    }
}

/// A number from the environment (decimal or 0x-hex), for seeds and case counts.
pub fn env_num(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}
