//! File notes: what a write will do to files once it commits, written down before the write is
//! queued, so that a crash between its COMMIT and the file work leaves a note that start-up
//! finishes by asking the database which side of the COMMIT the write ended on.
//!
//! The rule start-up applies is the database's: a file the record holds after the crash is in
//! place, a file it does not hold is gone. An upload named in the record is placed from its
//! temporary file; a dropped file the record no longer names is deleted; the folder of a record
//! that no longer exists is removed. Each step is idempotent, so a crash during start-up's own
//! work is finished by the next start.

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{FileWork, Storage, Upload, detect, is_plain};

/// The suffix of a note in the temporary folder (uploads end in `.part`).
pub(super) const NOTE_EXT: &str = ".intent";

/// A note on disk; dropping it deletes the file (the work it announced is done, or the write
/// it belonged to did not commit).
#[derive(Debug)]
pub(crate) struct Intent {
    /// None once the note is to stay on disk (see [`Interrupted::keep`]).
    path: Option<PathBuf>,
}

impl Drop for Intent {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The note's content.
#[derive(Debug, Serialize, Deserialize)]
struct Note {
    collection: String,
    record: String,
    place: Vec<Placing>,
    delete: Vec<String>,
    /// The write deletes the record: its folder goes once it did.
    folder: bool,
}

/// An upload the write attaches: its temporary file (a name in the temporary folder), the
/// name it is stored under, and what its sidecar records.
#[derive(Debug, Serialize, Deserialize)]
struct Placing {
    temp: String,
    name: String,
    original: String,
    md5: String,
}

/// A write's file work that a crash interrupted, found at start-up.
#[derive(Debug)]
pub(crate) struct Interrupted {
    note: Note,
    intent: Intent,
}

impl Interrupted {
    /// The record whose stored files decide what is done: `(collection id, record id)`.
    pub(crate) fn record(&self) -> (&str, &str) {
        (&self.note.collection, &self.note.record)
    }

    /// Leave the note and its uploads for the next start (the database could not be asked).
    pub(crate) fn keep(mut self) {
        self.intent.path = None;
    }
}

impl Storage {
    /// Write down, before a write is queued, the file work it will leave once it commits:
    /// `place` attached, `delete` dropped, and with `folder` the record's folder (a delete).
    /// None when there is nothing to note or the note could not be written (logged: the write
    /// goes on as it did before notes existed, and a crash after its COMMIT could leave its
    /// uploads unplaced).
    pub(crate) fn intend(
        &self,
        collection_id: &str,
        record_id: &str,
        place: &[Upload],
        delete: &[String],
        folder: bool,
    ) -> Option<Intent> {
        if place.is_empty() && delete.is_empty() && !folder {
            return None;
        }
        let note = Note {
            collection: collection_id.to_owned(),
            record: record_id.to_owned(),
            place: place
                .iter()
                .filter_map(|up| {
                    let temp = up.temp.as_deref()?.file_name()?.to_str()?.to_owned();
                    Some(Placing {
                        temp,
                        name: up.name.clone(),
                        original: up.original.clone(),
                        md5: base64::engine::general_purpose::STANDARD.encode(up.md5),
                    })
                })
                .collect(),
            delete: delete.to_vec(),
            folder,
        };
        let path = self
            .temp
            .join(format!("{}{NOTE_EXT}", crate::schema::ids::lower_alnum(20)));
        let written = serde_json::to_vec(&note)
            .map_err(io::Error::other)
            .and_then(|bytes| std::fs::write(&path, bytes));
        match written {
            Ok(()) => Some(Intent { path: Some(path) }),
            Err(e) => {
                tracing::error!(error = %e, "file note not written");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// The notes an earlier process left: writes whose file work a crash may have cut short.
    /// A note that cannot be read (cut short itself, so written before its write was queued)
    /// is deleted; the uploads it named are removed with the other leftovers at the next start.
    pub(crate) fn interrupted(&self) -> Vec<Interrupted> {
        let Ok(entries) = std::fs::read_dir(&self.temp) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if !is_note(&path) {
                continue;
            }
            match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Note>(&b).ok())
            {
                Some(note) => out.push(Interrupted {
                    note,
                    intent: Intent { path: Some(path) },
                }),
                None => {
                    tracing::warn!(path = %path.display(), "unreadable file note dropped");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out
    }

    /// Finish an interrupted write's file work by what the database holds now: `kept` holds,
    /// for each record the note names, the files it keeps (None: the record does not exist).
    /// Uploads it keeps are placed, dropped files it does not keep are deleted, the folders of
    /// records that are gone are removed; the note goes when that is done.
    pub(crate) fn finish_interrupted(
        &self,
        interrupted: Interrupted,
        kept: Option<&[String]>,
    ) -> FinishedWork {
        let Interrupted { note, intent } = interrupted;
        let holds = |name: &str| kept.is_some_and(|k| k.iter().any(|n| n == name));
        let mut done = FinishedWork::default();
        let mut place = Vec::new();
        for p in note.place {
            let temp = self.temp.join(&p.temp);
            if !is_plain(&p.temp) || !temp.is_file() {
                continue; // placed before the crash, or never received whole
            }
            if holds(&p.name) {
                match restored_upload(&temp, p) {
                    Ok(up) => place.push(up),
                    Err(e) => tracing::error!(error = %e, "interrupted upload not readable"),
                }
            } else {
                done.discarded += 1;
                let _ = std::fs::remove_file(&temp);
            }
        }
        done.placed = place.len();
        let delete: Vec<String> = note.delete.into_iter().filter(|n| !holds(n)).collect();
        done.deleted = delete.len();
        let folders = if note.folder && kept.is_none() {
            vec![(note.collection.clone(), note.record.clone())]
        } else {
            Vec::new()
        };
        done.folders = folders.len();
        self.apply(FileWork {
            collection_id: note.collection,
            record_id: note.record,
            place,
            delete,
            folders,
            intent: Some(intent),
        });
        done
    }
}

/// What start-up did with one interrupted write's files (logged, and checked by tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FinishedWork {
    pub placed: usize,
    pub discarded: usize,
    pub deleted: usize,
    pub folders: usize,
}

/// Whether `path` is a note in the temporary folder.
pub(super) fn is_note(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(NOTE_EXT))
}

/// The temporary files the notes in `temp` name (kept by start-up's cleanup for
/// [`Storage::finish_interrupted`]).
pub(super) fn noted_temps(temp: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_note(p))
        .filter_map(|p| serde_json::from_slice::<Note>(&std::fs::read(p).ok()?).ok())
        .flat_map(|n| n.place.into_iter().map(|p| p.temp))
        .collect()
}

/// An upload rebuilt from its note and its temporary file: the type sniffed again from its
/// first bytes (as it was when it was received), size and MD5 as noted and found.
fn restored_upload(temp: &Path, p: Placing) -> io::Result<Upload> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(super::SNIFF_BYTES);
    std::fs::File::open(temp)?
        .take(super::SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    let detected = detect(&head);
    let md5: [u8; 16] = base64::engine::general_purpose::STANDARD
        .decode(&p.md5)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| io::Error::other("bad md5 in a file note"))?;
    Ok(Upload {
        original: p.original,
        name: p.name,
        size: std::fs::metadata(temp)?.len(),
        mime: detected.mime,
        ext: detected.ext,
        md5,
        temp: Some(temp.to_owned()),
    })
}
