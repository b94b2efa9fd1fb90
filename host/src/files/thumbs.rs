//! Thumbnails as PocketBase 0.40.6 makes them: which `?thumb=` sizes and content types get one,
//! the crop, fill and fit geometry of its imaging library (linear filter, alpha-weighted), the
//! output format (JPEG and GIF stay, everything else becomes PNG), and where it is kept
//! (`<record>/thumbs_<name>/<size>_<name>` with a sidecar), so a data dir shared with PocketBase
//! reuses thumbs both ways. A thumb is made once, on the blocking pool, with the sources's
//! declared dimensions checked before anything is decoded.

use std::collections::HashMap;
use std::io::{self, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use image::{ImageDecoder as _, ImageFormat, ImageReader, Limits, RgbaImage};
use md5::Digest as _;

use super::{Storage, attrs_json, is_plain, sidecar};

/// The stored content types PocketBase makes thumbs of; any other file is served as it is.
const IMAGE_TYPES: &[&str] = &[
    "image/png",
    "image/jpg",
    "image/jpeg",
    "image/gif",
    "image/webp",
];

/// The size every file field allows besides its own `thumbs` option.
const ALWAYS_ALLOWED: &str = "100x100";

/// The most pixels a source may declare. A header can claim any size for a few bytes, so a
/// larger one is refused before decoding: 50 megapixels (a large phone photo) decode into
/// 200 MB of RGBA, which with PocketBase's few concurrent generations is the most we spend.
pub(crate) const SOURCE_PIXELS_MAX: u64 = 50_000_000;

/// The longest side a source may declare (checked by the decoder itself, from the header).
const SOURCE_SIDE_MAX: u32 = 50_000;

/// What a decoder may allocate for one source (the decoded image and its work buffers).
const DECODE_BYTES_MAX: u64 = 256 << 20;

/// The most pixels a thumb (or an upscaled step towards it) may have: sizes come from a
/// field's options, and `99999x99999` there must not allocate 40 GB.
pub(crate) const THUMB_PIXELS_MAX: u64 = 16_000_000;

/// How long a request waits for a generation slot before it gets the original instead
/// (PocketBase's `PB_THUMBS_MAX_WAIT` default).
const SLOT_WAIT: Duration = Duration::from_secs(60);

/// How a thumb fills its box (the suffix of `WxH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// `WxH`: fill the box, crop what overflows around the center.
    Center,
    /// `WxHt`: fill the box, keep the top.
    Top,
    /// `WxHb`: fill the box, keep the bottom.
    Bottom,
    /// `WxHf`: shrink to fit inside the box, never enlarge, never crop.
    Inside,
}

/// A parsed `?thumb=` size. A zero side keeps the aspect ratio (`0xH`, `Wx0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Size {
    pub width: u32,
    pub height: u32,
    pub fit: Fit,
}

impl Size {
    /// `WxH`, `WxHt`, `WxHb` or `WxHf` with decimal sides, not both zero.
    pub(crate) fn parse(s: &str) -> Result<Self, ThumbError> {
        let bad = || ThumbError::BadSize(s.to_owned());
        let (w, rest) = s.split_once('x').ok_or_else(bad)?;
        let (h, fit) = match rest.as_bytes().last() {
            Some(b't') => (&rest[..rest.len() - 1], Fit::Top),
            Some(b'b') => (&rest[..rest.len() - 1], Fit::Bottom),
            Some(b'f') => (&rest[..rest.len() - 1], Fit::Inside),
            _ => (rest, Fit::Center),
        };
        let side = |d: &str| {
            if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            // More digits than a u32 holds is a size no thumb could have anyway.
            d.parse::<u32>().map_err(|_| ThumbError::TooLarge)
        };
        let (width, height) = (side(w)?, side(h)?);
        if width == 0 && height == 0 {
            return Err(ThumbError::ZeroSize);
        }
        Ok(Self { width, height, fit })
    }
}

/// Why a thumb was not made. The request is answered with the original, as PocketBase does.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ThumbError {
    #[error("thumb size {0:?} must be in WxH, WxHt, WxHb or WxHf format")]
    BadSize(String),
    #[error("thumb width and height cannot be zero at the same time")]
    ZeroSize,
    #[error("the source declares {width}x{height} pixels, over the {SOURCE_PIXELS_MAX} allowed")]
    SourceTooLarge { width: u32, height: u32 },
    #[error("the thumb would be over {THUMB_PIXELS_MAX} pixels")]
    TooLarge,
    #[error("no generation slot within {SLOT_WAIT:?}")]
    Busy,
    #[error("the generation stopped: {0}")]
    Stopped(String),
    #[error(transparent)]
    Image(#[from] image::ImageError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

type Generation = Shared<BoxFuture<'static, Result<(), Arc<ThumbError>>>>;

/// The thumbs being made, by path: concurrent requests for one thumb await the same
/// generation, and a few generations run at a time (PocketBase's semaphore of CPUs + 2).
pub(crate) struct Generations {
    pending: Arc<Mutex<HashMap<PathBuf, Generation>>>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Default for Generations {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            pending: Arc::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(cpus + 2)),
        }
    }
}

impl std::fmt::Debug for Generations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("Generations").field("pending", &n).finish()
    }
}

/// Takes a finished (or abandoned) generation out of the pending map when dropped, so a
/// panic in the codec cannot leave it there.
struct Forget {
    pending: Arc<Mutex<HashMap<PathBuf, Generation>>>,
    key: PathBuf,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl Generations {
    /// Run `make` for `key` unless a run for it is pending, in which case await that one.
    async fn run(
        &self,
        key: PathBuf,
        make: impl FnOnce() -> Result<(), ThumbError> + Send + 'static,
    ) -> Result<(), Arc<ThumbError>> {
        let generation = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending
                .entry(key.clone())
                .or_insert_with(|| {
                    let forget = Forget {
                        pending: Arc::clone(&self.pending),
                        key,
                    };
                    let slots = Arc::clone(&self.slots);
                    async move {
                        let slot = tokio::time::timeout(SLOT_WAIT, slots.acquire_owned())
                            .await
                            .map_err(|_| ThumbError::Busy)?
                            .map_err(|_| ThumbError::Busy)?;
                        // Once on the blocking pool the generation finishes (and is forgotten)
                        // even when every request that waited for it has gone.
                        tokio::task::spawn_blocking(move || {
                            let _slot = slot;
                            let _forget = forget;
                            make()
                        })
                        .await
                        .map_err(|e| ThumbError::Stopped(e.to_string()))?
                    }
                    .map(|r: Result<(), ThumbError>| r.map_err(Arc::new))
                    .boxed()
                    .shared()
                })
                .clone()
        };
        generation.await
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The most bytes the thumbs kept in memory hold together, and the largest one kept.
const MEMO_BYTES: usize = 8 << 20;
const MEMO_ENTRY_BYTES: usize = 64 << 10;

/// A thumb served before, kept in memory with what serving it needs, so serving it again
/// touches no file. A thumb never changes under its path (its name carries the original's
/// random suffix); deleting the original or its record forgets it ([`Storage::delete`]).
#[derive(Debug)]
pub(crate) struct Remembered {
    pub bytes: bytes::Bytes,
    pub modified: std::time::SystemTime,
    pub stored_type: String,
}

/// The remembered thumbs by path, the oldest forgotten first past [`MEMO_BYTES`].
#[derive(Default, Debug)]
pub(crate) struct Memo {
    by_path: HashMap<PathBuf, Arc<Remembered>>,
    order: std::collections::VecDeque<PathBuf>,
    bytes: usize,
}

impl Memo {
    fn get(&self, path: &Path) -> Option<Arc<Remembered>> {
        self.by_path.get(path).cloned()
    }

    fn insert(&mut self, path: PathBuf, r: Remembered) {
        let n = r.bytes.len();
        if n > MEMO_ENTRY_BYTES || self.by_path.contains_key(&path) {
            return;
        }
        while self.bytes + n > MEMO_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.by_path.remove(&old) {
                self.bytes -= gone.bytes.len();
            }
        }
        self.bytes += n;
        self.order.push_back(path.clone());
        self.by_path.insert(path, Arc::new(r));
    }

    /// Forget every thumb under `dir`.
    fn forget_under(&mut self, dir: &Path) {
        let before = self.by_path.len();
        let mut freed = 0;
        self.by_path.retain(|p, r| {
            let keep = !p.starts_with(dir);
            if !keep {
                freed += r.bytes.len();
            }
            keep
        });
        if self.by_path.len() != before {
            self.bytes -= freed;
            let by_path = &self.by_path;
            self.order.retain(|p| by_path.contains_key(p));
        }
    }
}

/// A thumb to serve: from memory, or from its file.
pub(crate) enum Thumb {
    Remembered(Arc<Remembered>, String),
    OnDisk(PathBuf, String),
}

impl Storage {
    /// Keep a thumb just read from `path` in memory (see [`Remembered`]).
    pub(crate) fn remember_thumb(&self, path: PathBuf, r: Remembered) {
        self.memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path, r);
    }

    /// Forget the remembered thumbs under `dir` (a file or a record is being deleted).
    pub(super) fn forget_thumbs_under(&self, dir: &Path) {
        self.memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forget_under(dir);
    }

    /// The thumb to serve for `?thumb=<size>` of a stored file, from memory when it was served
    /// before, else its path (made first when it is not on disk yet), with the name it is
    /// served under. `None` when PocketBase serves the original instead: no or a not allowed
    /// size (`100x100` or one of the field's `thumbs`), a file that is not an image it thumbs,
    /// or a thumb that could not be made.
    pub(crate) async fn thumb(
        &self,
        collection_id: &str,
        record_id: &str,
        name: &str,
        size: &str,
        field_thumbs: &[String],
    ) -> Option<Thumb> {
        if size.is_empty() || (size != ALWAYS_ALLOWED && !field_thumbs.iter().any(|t| t == size)) {
            return None;
        }
        let original = self.file_path(collection_id, record_id, name)?;
        let served = format!("{size}_{name}");
        if !is_plain(&served) {
            return None;
        }
        let path = self
            .record_dir(collection_id, record_id)?
            .join(format!("thumbs_{name}"))
            .join(&served);
        let remembered = self
            .memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&path);
        if let Some(r) = remembered {
            return Some(Thumb::Remembered(r, served));
        }
        let (content_type, exists) = {
            let (o, p) = (original.clone(), path.clone());
            tokio::task::spawn_blocking(move || (Storage::content_type(&o), p.exists()))
                .await
                .ok()?
        };
        if !IMAGE_TYPES.contains(&content_type.as_str()) {
            return None;
        }
        if !exists {
            let (size, p) = (size.to_owned(), path.clone());
            let made = self
                .thumbs
                .run(path.clone(), move || {
                    // A request that raced the previous generation's end finds it done.
                    if p.exists() {
                        return Ok(());
                    }
                    create(&original, &p, Size::parse(&size)?, &content_type)
                })
                .await;
            if let Err(e) = made {
                tracing::warn!(thumb = %served, error = %e, "fallback to the original: thumb not made");
                return None;
            }
        }
        Some(Thumb::OnDisk(path, served))
    }
}

impl Storage {
    /// [`Storage::thumb`] on S3: the thumb's key (`thumbs_<name>/<size>_<name>` beside the
    /// file, as PocketBase keeps it) and the name it is served under. A missing thumb is made
    /// from the original, downloaded into the temporary folder, and put back with its type.
    pub(crate) async fn thumb_remote(
        &self,
        bucket: &Arc<super::Bucket>,
        collection_id: &str,
        record_id: &str,
        name: &str,
        size: &str,
        field_thumbs: &[String],
    ) -> Option<(String, String)> {
        if size.is_empty() || (size != ALWAYS_ALLOWED && !field_thumbs.iter().any(|t| t == size)) {
            return None;
        }
        let original = Storage::key(collection_id, record_id, name)?;
        let served = format!("{size}_{name}");
        if !is_plain(&served) {
            return None;
        }
        let key = format!("{collection_id}/{record_id}/thumbs_{name}/{served}");
        if bucket.head(&key).await.is_ok() {
            return Some((key, served));
        }
        let content_type = bucket.head(&original).await.ok()?.content_type;
        if !IMAGE_TYPES.contains(&content_type.as_str()) {
            return None;
        }
        let (b, k, size) = (Arc::clone(bucket), key.clone(), size.to_owned());
        let temp = self
            .temp
            .join(format!("{}.thumb", crate::schema::ids::lower_alnum(20)));
        let runtime = tokio::runtime::Handle::current();
        let made = self
            .thumbs
            .run(PathBuf::from(format!("s3:{key}")), move || {
                let _gone = RemoveOnDrop(temp.clone());
                // A request that raced the previous generation's end finds it done.
                if runtime.block_on(b.head(&k)).is_ok() {
                    return Ok(());
                }
                runtime
                    .block_on(b.download(&original, &temp))
                    .map_err(|e| ThumbError::Io(io::Error::other(e.to_string())))?;
                let (bytes, mime) = render(&temp, Size::parse(&size)?, &content_type)?;
                runtime
                    .block_on(b.put(&k, bytes.into(), mime, &[]))
                    .map_err(|e| ThumbError::Io(io::Error::other(e.to_string())))
            })
            .await;
        if let Err(e) = made {
            tracing::warn!(thumb = %served, error = %e, "fallback to the original: thumb not made");
            return None;
        }
        Some((key, served))
    }
}

/// Deletes a temporary file when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Make the thumb of `original` at `thumb`: decode, fit, encode, then its sidecar and the
/// file itself (renamed into place, so a reader never sees half a thumb). Blocking.
pub(crate) fn create(
    original: &Path,
    thumb: &Path,
    size: Size,
    content_type: &str,
) -> Result<(), ThumbError> {
    let (bytes, mime) = render(original, size, content_type)?;
    let dir = thumb
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "thumb without a folder"))?;
    std::fs::create_dir_all(dir)?;
    let md5: [u8; 16] = md5::Md5::digest(&bytes).into();
    std::fs::write(sidecar(thumb), attrs_json(mime, None, &md5))?;
    let temp = dir.join(format!(
        ".ferrobase_{}.part",
        crate::schema::ids::lower_alnum(12)
    ));
    let written = std::fs::File::create(&temp).and_then(|mut f| f.write_all(&bytes));
    if let Err(e) = written.and_then(|()| std::fs::rename(&temp, thumb)) {
        let _ = std::fs::remove_file(&temp);
        return Err(e.into());
    }
    Ok(())
}

/// The thumb of the image file `original` as encoded bytes and their content type. Blocking.
fn render(
    original: &Path,
    size: Size,
    content_type: &str,
) -> Result<(Vec<u8>, &'static str), ThumbError> {
    let source = decode(original)?;
    let out = transform(&source, size)?;
    drop(source);
    encode(&out, content_type)
}

/// The first frame of an image as RGBA, its EXIF orientation applied for a JPEG (PocketBase's
/// imaging library reads the orientation of JPEGs only). The format is sniffed from the bytes;
/// the declared dimensions are checked before any pixel is decoded.
fn decode(path: &Path) -> Result<RgbaImage, ThumbError> {
    let file = std::fs::File::open(path)?;
    let mut reader = ImageReader::new(BufReader::new(file)).with_guessed_format()?;
    let mut limits = Limits::default();
    limits.max_alloc = Some(DECODE_BYTES_MAX);
    limits.max_image_width = Some(SOURCE_SIDE_MAX);
    limits.max_image_height = Some(SOURCE_SIDE_MAX);
    reader.limits(limits);
    let format = reader.format();
    let mut decoder = reader.into_decoder()?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > SOURCE_PIXELS_MAX {
        return Err(ThumbError::SourceTooLarge { width, height });
    }
    let orientation = match format {
        Some(ImageFormat::Jpeg) => decoder.orientation().ok(),
        _ => None,
    };
    let mut image = image::DynamicImage::from_decoder(decoder)?;
    if let Some(o) = orientation {
        image.apply_orientation(o);
    }
    Ok(image.into_rgba8())
}

/// The thumb's geometry, as PocketBase's imaging library computes it: `0xH`/`Wx0` resize
/// keeping the aspect ratio (rounded, at least 1 px, enlarging too); `WxHf` fits inside without
/// enlarging (sides truncated); `WxH`/`t`/`b` fill the box and crop (a source of at least
/// 100x100 is cropped to the box's aspect ratio first, a smaller one resized first).
pub(crate) fn transform(src: &RgbaImage, size: Size) -> Result<RgbaImage, ThumbError> {
    let (sw, sh) = src.dimensions();
    let (w, h) = (size.width, size.height);
    if sw == 0 || sh == 0 {
        return Ok(RgbaImage::new(0, 0));
    }
    if w == 0 || h == 0 {
        return resize(src, w, h);
    }
    let anchor = match size.fit {
        Fit::Inside => {
            if sw <= w && sh <= h {
                return Ok(src.clone());
            }
            let src_ratio = f64::from(sw) / f64::from(sh);
            let (nw, nh) = if src_ratio > f64::from(w) / f64::from(h) {
                (w, (f64::from(w) / src_ratio) as u32)
            } else {
                ((f64::from(h) * src_ratio) as u32, h)
            };
            return resize(src, nw, nh);
        }
        Fit::Center => Anchor::Center,
        Fit::Top => Anchor::Top,
        Fit::Bottom => Anchor::Bottom,
    };
    if (sw, sh) == (w, h) {
        return Ok(src.clone());
    }
    let narrower = f64::from(sw) / f64::from(sh) < f64::from(w) / f64::from(h);
    if sw >= 100 && sh >= 100 {
        let cropped = if narrower {
            let ch = f64::from(sw) * f64::from(h) / f64::from(w);
            crop(src, sw, (ch.max(1.0) + 0.5) as u32, anchor)
        } else {
            let cw = f64::from(sh) * f64::from(w) / f64::from(h);
            crop(src, (cw.max(1.0) + 0.5) as u32, sh, anchor)
        };
        resize(&cropped, w, h)
    } else {
        let resized = if narrower {
            resize(src, w, 0)?
        } else {
            resize(src, 0, h)?
        };
        Ok(crop(&resized, w, h, anchor))
    }
}

#[derive(Debug, Clone, Copy)]
enum Anchor {
    Center,
    Top,
    Bottom,
}

/// The `w`x`h` part of `src` at `anchor`, clipped to `src` (horizontally always centered).
fn crop(src: &RgbaImage, w: u32, h: u32, anchor: Anchor) -> RgbaImage {
    let (sw, sh) = src.dimensions();
    // Go's integer division truncates towards zero; offsets are computed signed.
    let x = (i64::from(sw) - i64::from(w)) / 2;
    let y = match anchor {
        Anchor::Center => (i64::from(sh) - i64::from(h)) / 2,
        Anchor::Top => 0,
        Anchor::Bottom => i64::from(sh) - i64::from(h),
    };
    let (x0, y0) = (x.max(0), y.max(0));
    let x1 = (x + i64::from(w)).min(i64::from(sw));
    let y1 = (y + i64::from(h)).min(i64::from(sh));
    if x1 <= x0 || y1 <= y0 {
        return RgbaImage::new(0, 0);
    }
    let view = image::imageops::crop_imm(
        src,
        x0 as u32,
        y0 as u32,
        (x1 - x0) as u32,
        (y1 - y0) as u32,
    );
    view.to_image()
}

/// Resize to `w`x`h`; a zero side follows the aspect ratio (rounded half up, at least 1 px).
/// Each axis is resampled with the linear (triangle) filter, widened by the scale when
/// shrinking, with every sample weighted by its alpha.
fn resize(src: &RgbaImage, w: u32, h: u32) -> Result<RgbaImage, ThumbError> {
    let (sw, sh) = src.dimensions();
    if (w == 0 && h == 0) || sw == 0 || sh == 0 {
        return Ok(RgbaImage::new(0, 0));
    }
    let keep = |target: u32, num: u32, den: u32| {
        let v = (f64::from(target) * f64::from(num) / f64::from(den) + 0.5).floor();
        v.clamp(1.0, f64::from(u32::MAX)) as u32
    };
    let w = if w == 0 { keep(h, sw, sh) } else { w };
    let h = if h == 0 { keep(w, sh, sw) } else { h };
    if u64::from(w) * u64::from(h) > THUMB_PIXELS_MAX
        || u64::from(w) * u64::from(sh) > THUMB_PIXELS_MAX.max(u64::from(sw) * u64::from(sh))
    {
        return Err(ThumbError::TooLarge);
    }
    if (w, h) == (sw, sh) {
        return Ok(src.clone());
    }
    let mut out = src.clone();
    if w != sw {
        out = resample(&out, w, true);
    }
    if h != sh {
        out = resample(&out, h, false);
    }
    Ok(out)
}

/// One axis of `src` resampled to `len` pixels.
fn resample(src: &RgbaImage, len: u32, horizontal: bool) -> RgbaImage {
    let (sw, sh) = src.dimensions();
    let (src_len, across) = if horizontal { (sw, sh) } else { (sh, sw) };
    let weights = weights(len, src_len);
    let (ow, oh) = if horizontal { (len, sh) } else { (sw, len) };
    let mut out = RgbaImage::new(ow, oh);
    for line in 0..across {
        for (i, taps) in weights.iter().enumerate() {
            let i = i as u32;
            let (mut r, mut g, mut b, mut a) = (0f64, 0f64, 0f64, 0f64);
            for &(at, weight) in taps {
                let p = if horizontal {
                    src.get_pixel(at, line)
                } else {
                    src.get_pixel(line, at)
                };
                let aw = f64::from(p[3]) * weight;
                r += f64::from(p[0]) * aw;
                g += f64::from(p[1]) * aw;
                b += f64::from(p[2]) * aw;
                a += aw;
            }
            if a != 0.0 {
                let px = image::Rgba([clamp(r / a), clamp(g / a), clamp(b / a), clamp(a)]);
                if horizontal {
                    out.put_pixel(i, line, px);
                } else {
                    out.put_pixel(line, i, px);
                }
            }
        }
    }
    out
}

/// For each output pixel, its source pixels and normalised triangle weights.
fn weights(dst_len: u32, src_len: u32) -> Vec<Vec<(u32, f64)>> {
    let du = f64::from(src_len) / f64::from(dst_len);
    let scale = du.max(1.0);
    let reach = scale.ceil();
    (0..dst_len)
        .map(|v| {
            let center = (f64::from(v) + 0.5) * du - 0.5;
            let first = (center - reach).ceil().max(0.0) as u32;
            let last = ((center + reach).floor() as i64).min(i64::from(src_len) - 1);
            let mut taps: Vec<(u32, f64)> = (i64::from(first)..=last)
                .filter_map(|u| {
                    let x = ((u as f64 - center) / scale).abs();
                    (x < 1.0).then_some((u as u32, 1.0 - x))
                })
                .collect();
            let sum: f64 = taps.iter().map(|t| t.1).sum();
            if sum != 0.0 {
                for t in &mut taps {
                    t.1 /= sum;
                }
            }
            taps
        })
        .collect()
}

fn clamp(v: f64) -> u8 {
    (v + 0.5).clamp(0.0, 255.0) as u8
}

/// The thumb's bytes and content type: a JPEG stays JPEG (quality 95), a GIF stays GIF (one
/// frame), anything else (PNG, WebP) becomes PNG, as PocketBase encodes them.
fn encode(img: &RgbaImage, original_type: &str) -> Result<(Vec<u8>, &'static str), ThumbError> {
    let mut out = Vec::new();
    let mime = match original_type {
        "image/jpeg" => {
            // JPEG has no alpha: colours are taken premultiplied, as Go's encoder reads them.
            let rgb = image::RgbImage::from_fn(img.width(), img.height(), |x, y| {
                let p = img.get_pixel(x, y);
                let pre = |c: u8| ((u32::from(c) * u32::from(p[3]) + 127) / 255) as u8;
                image::Rgb([pre(p[0]), pre(p[1]), pre(p[2])])
            });
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95).encode_image(&rgb)?;
            "image/jpeg"
        }
        "image/gif" => {
            {
                // The encoder writes the trailer when it is dropped.
                let mut enc = image::codecs::gif::GifEncoder::new_with_speed(&mut out, 10);
                enc.encode_frame(image::Frame::new(img.clone()))?;
            }
            "image/gif"
        }
        _ => {
            use image::ImageEncoder as _;
            let enc = image::codecs::png::PngEncoder::new(&mut out);
            // Go's PNG encoder writes an opaque image without its alpha channel.
            if img.pixels().all(|p| p[3] == 255) {
                let rgb = image::DynamicImage::ImageRgba8(img.clone()).into_rgb8();
                enc.write_image(
                    rgb.as_raw(),
                    rgb.width(),
                    rgb.height(),
                    image::ExtendedColorType::Rgb8,
                )?;
            } else {
                enc.write_image(
                    img.as_raw(),
                    img.width(),
                    img.height(),
                    image::ExtendedColorType::Rgba8,
                )?;
            }
            "image/png"
        }
    };
    Ok((out, mime))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated inserts and forgets against a plain list kept in insertion order: the memo
    /// holds exactly the newest entries that fit, never more than its budget, and forgets what
    /// lies under a deleted folder.
    #[test]
    fn the_memo_keeps_the_newest_thumbs_within_its_budget() {
        let mut next = crate::test_numbers(0x9e37_79b9_u64);
        let mut memo = Memo::default();
        let mut model: Vec<(PathBuf, usize)> = Vec::new();
        for step in 0..3000 {
            let record = next(20);
            let dir = PathBuf::from(format!("/s/c/r{record}"));
            if next(10) == 0 {
                memo.forget_under(&dir);
                model.retain(|(p, _)| !p.starts_with(&dir));
            } else {
                let path = dir.join(format!("thumbs_f{}.png/100x100_f.png", next(8)));
                let len = match next(20) {
                    0 => MEMO_ENTRY_BYTES + 1,
                    _ => 1 + next(MEMO_ENTRY_BYTES as u64) as usize,
                };
                let r = Remembered {
                    bytes: bytes::Bytes::from(vec![step as u8; len]),
                    modified: std::time::SystemTime::UNIX_EPOCH,
                    stored_type: "image/png".into(),
                };
                memo.insert(path.clone(), r);
                if len <= MEMO_ENTRY_BYTES && !model.iter().any(|(p, _)| *p == path) {
                    model.push((path, len));
                    while model.iter().map(|(_, n)| n).sum::<usize>() > MEMO_BYTES {
                        model.remove(0);
                    }
                }
            }
            let total: usize = model.iter().map(|(_, n)| n).sum();
            assert_eq!(memo.bytes, total, "step {step}");
            assert!(memo.bytes <= MEMO_BYTES);
            assert_eq!(memo.by_path.len(), model.len(), "step {step}");
            assert_eq!(memo.order.len(), model.len(), "step {step}");
            for (p, n) in &model {
                assert_eq!(memo.get(p).map(|r| r.bytes.len()), Some(*n), "step {step}");
            }
        }
    }

    fn size(s: &str) -> Size {
        Size::parse(s).unwrap()
    }

    fn gradient(w: u32, h: u32) -> RgbaImage {
        RgbaImage::from_fn(w, h, |x, y| {
            image::Rgba([
                (x * 255 / w.max(1)) as u8,
                (y * 255 / h.max(1)) as u8,
                90,
                255,
            ])
        })
    }

    fn dims(src: (u32, u32), s: &str) -> (u32, u32) {
        transform(&gradient(src.0, src.1), size(s))
            .unwrap()
            .dimensions()
    }

    #[test]
    fn sizes_parse_as_pocketbase_reads_them() {
        assert_eq!(
            size("100x50"),
            Size {
                width: 100,
                height: 50,
                fit: Fit::Center
            }
        );
        assert_eq!(size("0x50t").fit, Fit::Top);
        assert_eq!(size("10x5b").fit, Fit::Bottom);
        assert_eq!(size("10x5f").fit, Fit::Inside);
        for bad in [
            "", "x", "10", "10x", "x10", "10x10c", "-1x5", "10x 5", "1.5x2", "10X10",
        ] {
            assert!(
                matches!(Size::parse(bad), Err(ThumbError::BadSize(_))),
                "{bad}"
            );
        }
        assert!(matches!(Size::parse("0x0"), Err(ThumbError::ZeroSize)));
        assert!(matches!(
            Size::parse("99999999999x1"),
            Err(ThumbError::TooLarge)
        ));
    }

    #[test]
    fn geometry_follows_pocketbases_imaging_library() {
        // Keep the aspect ratio: rounded half up, enlarging allowed.
        assert_eq!(dims((300, 200), "0x50"), (75, 50));
        assert_eq!(dims((300, 200), "50x0"), (50, 33));
        assert_eq!(dims((30, 20), "0x100"), (150, 100));
        assert_eq!(dims((1000, 1), "10x0"), (10, 1));
        // Fill and crop: exactly the box.
        for s in ["80x30", "80x30t", "80x30b", "30x80", "500x400"] {
            let want = (size(s).width, size(s).height);
            assert_eq!(dims((300, 200), s), want, "{s}");
            assert_eq!(dims((40, 60), s), want, "{s} small source");
        }
        // Fit: shrink only, sides truncated.
        assert_eq!(dims((300, 200), "80x30f"), (45, 30));
        assert_eq!(dims((300, 200), "100x100f"), (100, 66));
        assert_eq!(dims((300, 200), "400x400f"), (300, 200));
    }

    #[test]
    fn crops_keep_the_center_the_top_or_the_bottom() {
        // Top half red, bottom half blue, 100x200: a 100x100 box shows one or the other.
        let src = RgbaImage::from_fn(100, 200, |_, y| {
            if y < 100 {
                image::Rgba([255, 0, 0, 255])
            } else {
                image::Rgba([0, 0, 255, 255])
            }
        });
        let top = transform(&src, size("100x100t")).unwrap();
        assert!(top.pixels().all(|p| p.0 == [255, 0, 0, 255]));
        let bottom = transform(&src, size("100x100b")).unwrap();
        assert!(bottom.pixels().all(|p| p.0 == [0, 0, 255, 255]));
        let center = transform(&src, size("100x100")).unwrap();
        assert_eq!(center.get_pixel(50, 10).0, [255, 0, 0, 255]);
        assert_eq!(center.get_pixel(50, 90).0, [0, 0, 255, 255]);
    }

    #[test]
    fn resampling_averages_and_ignores_transparent_colour() {
        // A flat colour stays itself at any scale.
        let flat = RgbaImage::from_pixel(37, 23, image::Rgba([10, 200, 30, 255]));
        let out = resize(&flat, 5, 9).unwrap();
        assert!(out.pixels().all(|p| p.0 == [10, 200, 30, 255]));
        // Black and white columns shrink to grey.
        let stripes = RgbaImage::from_fn(100, 10, |x, _| {
            let v = if x % 2 == 0 { 0 } else { 255 };
            image::Rgba([v, v, v, 255])
        });
        let out = resize(&stripes, 10, 10).unwrap();
        assert!(out.pixels().all(|p| (120..=135).contains(&p[0])), "{out:?}");
        // A transparent pixel's colour does not bleed into its opaque neighbour.
        let half = RgbaImage::from_fn(2, 1, |x, _| {
            if x == 0 {
                image::Rgba([255, 0, 0, 255])
            } else {
                image::Rgba([0, 255, 0, 0])
            }
        });
        let out = resize(&half, 1, 1).unwrap();
        assert_eq!(&out.get_pixel(0, 0).0[..3], &[255, 0, 0]);
        assert_eq!(out.get_pixel(0, 0)[3], 128);
    }

    #[test]
    fn oversized_thumbs_are_refused() {
        let src = gradient(10, 10);
        assert!(matches!(
            transform(&src, size("99999x99999")),
            Err(ThumbError::TooLarge)
        ));
        assert!(matches!(
            transform(&src, size("0x99999")),
            Err(ThumbError::TooLarge)
        ));
    }

    fn png_header(width: u32, height: u32) -> Vec<u8> {
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut chunk = |data: &[u8]| {
            out.extend_from_slice(&(data.len() as u32 - 4).to_be_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(&crc32fast::hash(data).to_be_bytes());
        };
        chunk(&ihdr);
        // A first IDAT (a zlib stream of one stored block of ten zero bytes), so the decoder
        // gets past the header: the rows it promises never come.
        let mut idat = b"IDAT\x78\x01\x01\x0a\x00\xf5\xff".to_vec();
        idat.extend_from_slice(&[0; 10]);
        idat.extend_from_slice(&[0x00, 0x0a, 0x00, 0x01]);
        chunk(&idat);
        chunk(b"IEND");
        out
    }

    #[test]
    fn a_decompression_bomb_is_refused_by_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("bomb.png");
        std::fs::write(&src, png_header(100_000, 100_000)).unwrap();
        let thumb = dir.path().join("thumbs_bomb.png/100x100_bomb.png");
        let err = create(&src, &thumb, size("100x100"), "image/png").unwrap_err();
        assert!(
            matches!(err, ThumbError::Image(image::ImageError::Limits(_))),
            "{err}"
        );
        // Sides within the decoder's limit, pixels over ours.
        std::fs::write(&src, png_header(20_000, 20_000)).unwrap();
        let err = create(&src, &thumb, size("100x100"), "image/png").unwrap_err();
        assert!(
            matches!(err, ThumbError::SourceTooLarge { width: 20_000, .. }),
            "{err}"
        );
        assert!(!thumb.exists());
        // Within the pixel budget but truncated: a decoding error, nothing written.
        std::fs::write(&src, png_header(4000, 4000)).unwrap();
        let err = create(&src, &thumb, size("100x100"), "image/png").unwrap_err();
        assert!(matches!(err, ThumbError::Image(_)), "{err}");
        std::fs::write(&src, b"not an image at all").unwrap();
        assert!(create(&src, &thumb, size("100x100"), "image/png").is_err());
        assert!(!thumb.exists());
    }

    #[test]
    fn a_thumb_is_written_with_its_sidecar_in_pocketbases_format() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("a.png", ImageFormat::Png, "image/png", "image/png"),
            ("a.jpg", ImageFormat::Jpeg, "image/jpeg", "image/jpeg"),
            ("a.gif", ImageFormat::Gif, "image/gif", "image/gif"),
            ("a.webp", ImageFormat::WebP, "image/webp", "image/png"),
        ];
        for (name, format, stored, made) in cases {
            let src = dir.path().join(name);
            let rgb = image::DynamicImage::ImageRgba8(gradient(120, 80)).into_rgb8();
            let bytes = {
                let mut out = std::io::Cursor::new(Vec::new());
                rgb.write_to(&mut out, format).unwrap();
                out.into_inner()
            };
            std::fs::write(&src, bytes).unwrap();
            let thumb = dir.path().join(format!("thumbs_{name}/50x50_{name}"));
            create(&src, &thumb, size("50x50"), stored).unwrap();
            let out = std::fs::read(&thumb).unwrap();
            let img = image::load_from_memory(&out).unwrap();
            assert_eq!((img.width(), img.height()), (50, 50), "{name}");
            let guessed = image::guess_format(&out).unwrap();
            assert_eq!(guessed.to_mime_type(), made, "{name}");
            let attrs = std::fs::read_to_string(sidecar(&thumb)).unwrap();
            assert!(
                attrs.contains(&format!(
                    "\"user.content_type\":\"{made}\",\"user.metadata\":{{}},"
                )),
                "{attrs}"
            );
            assert_eq!(Storage::content_type(&thumb), made);
            // No temporary file is left beside it.
            assert_eq!(
                std::fs::read_dir(thumb.parent().unwrap()).unwrap().count(),
                2
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_share_one_generation() {
        let g = Generations::default();
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let waiters = (0..8).map(|_| {
            let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
            g.run(PathBuf::from("k"), move || {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = gate.lock().unwrap().recv();
                Ok(())
            })
        });
        // `join` polls the waiters first: all eight are registered before the release is sent.
        let release = async {
            tokio::task::yield_now().await;
            release.send(()).unwrap();
        };
        let (results, ()) =
            futures_util::future::join(futures_util::future::join_all(waiters), release).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(g.pending(), 0);
        // A failure reaches every waiter and is forgotten: the next request tries again.
        let err = g
            .run(PathBuf::from("k"), || Err(ThumbError::ZeroSize))
            .await
            .unwrap_err();
        assert!(matches!(*err, ThumbError::ZeroSize));
        assert_eq!(g.pending(), 0);
        // A panicking codec is an error, not a crash, and is forgotten too.
        let err = g
            .run(PathBuf::from("k"), || panic!("codec bug"))
            .await
            .unwrap_err();
        assert!(matches!(*err, ThumbError::Stopped(_)), "{err}");
        assert_eq!(g.pending(), 0);
    }
}
