//! Compaction: copying the valid records of a mostly settled sealed segment into a new
//! file and renaming it over the old one (docs/storage.md §7).

use super::*;

impl QueueStore {
    /// Whether a sealed segment has more than [`COMPACT_RECORDS_MIN`] records and under
    /// [`COMPACT_VALID_PERCENT_MAX`]% valid (docs/storage.md).
    pub fn needs_compaction(&self) -> bool {
        self.segments
            .iter()
            .any(|(&n, s)| n != self.active && s.needs_compaction())
    }

    /// Compacts every segment [`QueueStore::needs_compaction`] describes: copies its valid
    /// records (same ids, checksums verified) into `queue_data.N.compact`, fsyncs it,
    /// renames it over `queue_data.N` and fsyncs the directory, so at no moment is a valid
    /// record only in a file about to be deleted (crash analysis in `docs/storage.md`).
    /// The ack log is kept as it is: its entries for records dropped by the compaction
    /// match no record any more and are ignored. Returns the bytes reclaimed.
    ///
    /// Runs under the caller's lock and fsyncs; call it from housekeeping, not per message.
    ///
    /// # Errors
    /// An I/O error, or [`StorageError::Corrupt`] when a record to copy no longer verifies;
    /// the store is out of service afterwards (the original segment is intact unless the
    /// rename happened).
    pub fn compact(&mut self) -> Result<u64, StorageError> {
        self.check_ok()?;
        let r = self.compact_inner();
        self.poison_on_err(r)
    }

    fn compact_inner(&mut self) -> Result<u64, StorageError> {
        // The copy reads the files and the rewritten ack logs replace them: nothing may
        // still wait in memory.
        self.write_pending_inner()?;
        let candidates: Vec<u64> = self
            .segments
            .iter()
            .filter(|(&n, s)| n != self.active && s.needs_compaction())
            .map(|(&n, _)| n)
            .collect();
        let mut reclaimed = 0;
        for &n in &candidates {
            reclaimed += self.compact_segment(n)?;
        }
        if !candidates.is_empty() {
            self.write_stat_inner()?;
        }
        Ok(reclaimed)
    }

    fn compact_segment(&mut self, n: u64) -> Result<u64, StorageError> {
        let data_path = self.dir.join(data_name(n));
        let compact_path = self.dir.join(format!("{}{COMPACT_SUFFIX}", data_name(n)));
        let cio = |e| StorageError::io(&compact_path, e);
        let old = self.file(n, FilePart::Data)?;
        if self.backend.exists(&compact_path) {
            self.backend.remove_file(&compact_path).map_err(cio)?;
        }
        let new = self.backend.open(&compact_path, true).map_err(cio)?;
        let segment = self.segments.get(&n).ok_or_else(|| StorageError::Corrupt {
            path: data_path.clone(),
            reason: "segment vanished from the index".into(),
        })?;
        let mut kept = Segment::default();
        let mut header = [0u8; HEADER_BYTES];
        let mut buf = Vec::new();
        for i in 0..segment.ids.len() {
            if segment.state[i] & SETTLED != 0 {
                continue;
            }
            let (id, offset) = (segment.ids[i], segment.offsets[i]);
            let corrupt = |reason: String| StorageError::Corrupt {
                path: data_path.clone(),
                reason: format!("record {id} at offset {offset}: {reason}"),
            };
            old.read_at(offset, &mut header)
                .map_err(|e| StorageError::io(&data_path, e))?;
            let h = record::decode_header(&header).map_err(|e| corrupt(e.to_string()))?;
            buf.resize(h.record_len(), 0);
            old.read_at(offset, &mut buf)
                .map_err(|e| StorageError::io(&data_path, e))?;
            let view = record::decode(&buf).map_err(|e| corrupt(e.to_string()))?;
            if view.id != id {
                return Err(corrupt(format!("holds id {}", view.id)));
            }
            let at = new.append(&buf).map_err(cio)?;
            kept.push(id, at, segment.state[i]);
        }
        new.sync().map_err(cio)?;
        let new_len = new.len().map_err(cio)?;
        let old_len = segment.data_bytes;
        // Only now, with every valid record durable in the new file, replace the old one.
        self.backend
            .rename(&compact_path, &data_path)
            .map_err(|e| StorageError::io(&data_path, e))?;
        kept.data_bytes = new_len;
        let old_acks = segment.ack_bytes;
        kept.ack_bytes = old_acks;
        // The index follows the file at once: whatever fails later, reads use the new
        // offsets (the old ack log still holds for the kept records).
        self.segments.insert(n, kept);
        // The cached handle is the replaced file's.
        self.files.forget(FileKey {
            segment: n,
            part: FilePart::Data,
        });
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))?;
        let new_acks = self.rewrite_acks(n)?;
        if let Some(s) = self.segments.get_mut(&n) {
            s.ack_bytes = new_acks;
        }
        Ok(old_len.saturating_sub(new_len) + old_acks.saturating_sub(new_acks))
    }

    /// Rewrites a compacted segment's ack log with only what its kept records need: their
    /// delivered entries (the delivery counts). Written to `queue_acks.N.compact`, fsynced,
    /// renamed over the log, directory fsynced. A crash before the rename leaves the old
    /// log, which is still right (its entries for dropped records match no record).
    /// Returns the new log's length in bytes.
    fn rewrite_acks(&mut self, n: u64) -> Result<u64, StorageError> {
        let acks_path = self.dir.join(acks_name(n));
        let compact_path = self.dir.join(format!("{}{COMPACT_SUFFIX}", acks_name(n)));
        let cio = |e| StorageError::io(&compact_path, e);
        let kept = self.segments.get(&n).ok_or_else(|| StorageError::Corrupt {
            path: acks_path.clone(),
            reason: "segment vanished from the index".into(),
        })?;
        let mut bytes = Vec::new();
        for (i, &id) in kept.ids.iter().enumerate() {
            let deliveries = kept.state[i] & !SETTLED;
            for _ in 0..deliveries {
                bytes.extend_from_slice(&ack_log::encode(ack_log::AckEntry {
                    kind: ack_log::AckKind::Delivered,
                    id,
                }));
            }
        }
        if self.backend.exists(&compact_path) {
            self.backend.remove_file(&compact_path).map_err(cio)?;
        }
        let new = self.backend.open(&compact_path, true).map_err(cio)?;
        if !bytes.is_empty() {
            new.append(&bytes).map_err(cio)?;
        }
        new.sync().map_err(cio)?;
        self.backend
            .rename(&compact_path, &acks_path)
            .map_err(|e| StorageError::io(&acks_path, e))?;
        self.files.forget(FileKey {
            segment: n,
            part: FilePart::Acks,
        });
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))?;
        Ok(bytes.len() as u64)
    }
}
