//! The instruction-set levels the kernels come in, and which of them this CPU runs.

/// Environment variable that lowers the level the backend uses (`scalar`, `avx2`): to measure or
/// test a lower level's kernels on a CPU that has a higher one.
pub const CAP_ENV: &str = "MTPLX_ISA";
/// Environment variable that chooses attention's products at the `Avx512` level: `f32` keeps them
/// in f32, `bf16` multiplies bf16 pairs where the CPU has AVX-512 BF16, `amx` multiplies tiles
/// where it has AMX-BF16; unset (or any other value), tiles where the CPU has them, else the
/// CPU's maker decides ([`Isa::bf16_attention`]).
pub const ATTENTION_ENV: &str = "MTPLX_ATTENTION";

/// The instruction-set level the kernels run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust; the reference the others are tested against.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/VNNI on top of `Avx2`.
    Avx512,
}

impl Isa {
    /// Every level, from `Scalar` up.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The best level this CPU supports, lowered to the level [`CAP_ENV`] names if it is set
    /// (a value [`Isa::cap`] rejects is ignored here: the command line reports it at start).
    pub fn detect() -> Isa {
        let best = *Isa::available().last().unwrap_or(&Isa::Scalar);
        match Isa::cap() {
            Ok(Some(cap)) => cap,
            _ => best,
        }
    }

    /// The level [`CAP_ENV`] asks for, if it is set: `Err` when it names no level or one this CPU
    /// lacks.
    pub fn cap() -> Result<Option<Isa>, String> {
        let Some(v) = std::env::var_os(CAP_ENV) else {
            return Ok(None);
        };
        let v = v.to_string_lossy();
        let isa = Isa::from_name(&v)
            .ok_or_else(|| format!("{CAP_ENV}={v} names no instruction-set level (scalar, avx2 or avx512vnni)"))?;
        if !Isa::available().contains(&isa) {
            return Err(format!("{CAP_ENV}={v}: this CPU does not support {}", isa.name()));
        }
        Ok(Some(isa))
    }

    /// Every level this CPU supports, from `Scalar` up.
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            if avx2 {
                v.push(Isa::Avx2);
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    v.push(Isa::Avx512);
                }
            }
        }
        v
    }

    /// Whether this level's attention kernels can multiply bf16 pairs: `Avx512` on a CPU with
    /// AVX-512 BF16.
    pub fn bf16_kernels(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        let has = is_x86_feature_detected!("avx512bf16");
        #[cfg(not(target_arch = "x86_64"))]
        let has = false;
        self == Isa::Avx512 && has
    }

    /// Whether attention at this level multiplies bf16 pairs (`vdpbf16ps`, twice an FMA's
    /// products per instruction) where it can ([`Isa::bf16_kernels`]): as [`ATTENTION_ENV`]
    /// says, else on every CPU but Intel's. On AMD Zen 4 the pairs made a prompt's attention
    /// faster; Intel Sapphire Rapids runs one `vdpbf16ps` in about 1.8 cycles at any width (16
    /// products per 0.55 ns, where 256-bit FMAs give 8 per 0.14 ns), and there a 4,096-token
    /// prompt prefilled 1.37x faster in f32 (docs/performance.md).
    pub fn bf16_attention(self) -> bool {
        self.bf16_kernels()
            && match attention_choice() {
                Some("bf16") => true,
                Some("f32" | "amx") => false,
                _ => !made_by_intel(),
            }
    }

    /// Whether this level's attention kernels can multiply AMX tiles: `Avx512` on a CPU with
    /// AMX-BF16 (and AVX-512 BF16, which rounds the tiles' weights) whose kernel lets this
    /// process use the tiles' registers (Linux asks each process to request them).
    pub fn tile_kernels(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            static TILES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            let tiles = || {
                let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
                // CPUID.(7, 0).EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
                let amx = edx & (1 << 22) != 0 && edx & (1 << 24) != 0;
                amx && is_x86_feature_detected!("avx512bf16") && super::kern_amx_attn::request_tiles()
            };
            self == Isa::Avx512 && *TILES.get_or_init(tiles)
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether attention at this level multiplies tiles where it can ([`Isa::tile_kernels`]): on
    /// every CPU that has them unless [`ATTENTION_ENV`] asks for `f32` or `bf16`. A tile multiply
    /// does 16 lanes' scores of 16 keys over 32 of the head's dimensions in one instruction,
    /// where the f32 kernels take an FMA per key and dimension for 16 lanes (docs/performance.md,
    /// "Attention in AMX tiles").
    pub fn tile_attention(self) -> bool {
        self.tile_kernels() && !matches!(attention_choice(), Some("f32" | "bf16"))
    }

    /// Whether attention at this level rounds its queries, keys, values and weights to bf16
    /// (in pairs or in tiles), which its accuracy bounds depend on.
    pub fn attention_in_bf16(self) -> bool {
        self.bf16_attention() || self.tile_attention()
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The level named `name`: its [`Isa::name`], or `avx512vnni` for `Avx512` (the level
    /// needs VNNI, and that is the name `/proc/cpuinfo` readers look for).
    pub fn from_name(name: &str) -> Option<Isa> {
        match name {
            "avx512vnni" => Some(Isa::Avx512),
            _ => Isa::ALL.into_iter().find(|i| i.name() == name),
        }
    }
}

/// [`ATTENTION_ENV`]'s value, read once, so that every call of a process agrees.
fn attention_choice() -> Option<&'static str> {
    static CHOICE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    CHOICE.get_or_init(|| std::env::var(ATTENTION_ENV).ok()).as_deref()
}

/// Whether a one-row pass of the AVX-512 kernels over the row-interleaved layout reads two
/// groups of weight rows at once (the pair tile) rather than one: on Intel, where the pair and
/// its hints were tuned (the other way is not measured there); not on AMD, where one group at a
/// time made decode much faster (Zen 4: docs/performance.md, "One row over the interleaved
/// layout on Zen 4"). Passes of several rows take pairs everywhere. Read once.
pub fn one_row_pairs() -> bool {
    static PAIRS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAIRS.get_or_init(made_by_intel)
}

/// Whether the CPU's vendor string (CPUID leaf 0) says Intel.
fn made_by_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let r = std::arch::x86_64::__cpuid(0);
        let vendor: Vec<u8> = [r.ebx, r.edx, r.ecx].iter().flat_map(|w| w.to_le_bytes()).collect();
        vendor == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}
