//! The content type of an upload, read from its first bytes as PocketBase's detector reads
//! them, for the signatures PocketBase apps meet most (images, PDF, archives, text). Anything
//! else is `application/octet-stream`, as PocketBase calls what it cannot name.

/// How many leading bytes are looked at (PocketBase's detector reads 3 KiB).
pub(crate) const SNIFF_BYTES: usize = 3072;

/// A detected type: its MIME string (as PocketBase writes it into the sidecar) and the
/// extension it suggests for a name without one (empty when none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Detected {
    pub mime: &'static str,
    pub ext: &'static str,
}

const OCTET: Detected = Detected {
    mime: "application/octet-stream",
    ext: "",
};

/// Detect the type of content that starts with `head` (at most [`SNIFF_BYTES`] are used).
pub(crate) fn detect(head: &[u8]) -> Detected {
    let head = &head[..head.len().min(SNIFF_BYTES)];
    let d = |mime, ext| Detected { mime, ext };
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return d("image/png", ".png");
    }
    if head.starts_with(b"\xff\xd8\xff") {
        return d("image/jpeg", ".jpg");
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        return d("image/gif", ".gif");
    }
    if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        return d("image/webp", ".webp");
    }
    if head.starts_with(b"BM") && head.len() >= 14 {
        return d("image/bmp", ".bmp");
    }
    if head.starts_with(b"\x00\x00\x01\x00") {
        return d("image/x-icon", ".ico");
    }
    if head.starts_with(b"%PDF-") {
        return d("application/pdf", ".pdf");
    }
    if head.starts_with(b"\x1f\x8b") {
        return d("application/gzip", ".gz");
    }
    if head.starts_with(b"PK\x03\x04") {
        return d("application/zip", ".zip");
    }
    if head.is_empty() {
        return d("text/plain", ".txt");
    }
    if is_text(head) {
        return d("text/plain; charset=utf-8", ".txt");
    }
    OCTET
}

/// Text as the detector sees it: no NUL and no other control byte but whitespace and escape,
/// and valid UTF-8 (a sequence cut at the end of the sniffed window still counts).
fn is_text(head: &[u8]) -> bool {
    if head
        .iter()
        .any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b))
    {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() == SNIFF_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_types_are_named() {
        assert_eq!(detect(b"\x89PNG\r\n\x1a\n....").mime, "image/png");
        assert_eq!(detect(b"%PDF-1.7").ext, ".pdf");
        assert_eq!(detect(b"hello").mime, "text/plain; charset=utf-8");
        assert_eq!(detect(b"\x1f\x8b\x08\x00").mime, "application/gzip");
        assert_eq!(detect(&[0, 1, 2, 3, 200]), OCTET);
        assert_eq!(detect(b"bad \xff utf8"), OCTET);
    }
}
