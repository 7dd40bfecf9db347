//! Engine metrics: gauges and counters the scheduler keeps current and `Engine::metrics` reads
//! at any time. The list is written once, in [`with_metrics!`]; the live atomics, the plain
//! snapshot and the binding's JS object are generated from it, so a new metric is one line
//! there (plus the code that updates it).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls `$then! { $( $(#[doc = "…"])* name, )* }` with every metric, so other crates (the
/// napi binding) can declare their view of the snapshot from the same list. Docs are written
/// as `#[doc = "…"]`: `///` would reach napi's d.ts generator as raw strings it cannot read.
#[macro_export]
macro_rules! with_metrics {
    ($then:ident) => {
        $then! {
            #[doc = "Sequences in the running batch."]
            running,
            #[doc = "Submitted but not yet admitted (includes commands still in the channel)."]
            waiting,
            prompt_tokens_total,
            generation_tokens_total,
            #[doc = "Forward steps run."]
            steps_total,
            kv_blocks_total,
            kv_blocks_used,
            #[doc = "Full blocks kept for reuse (used or idle)."]
            kv_blocks_cached,
            #[doc = "Tokens per KV block."]
            kv_block_size,
            #[doc = "Prompt tokens looked up in the prefix cache."]
            prefix_query_tokens_total,
            #[doc = "Prompt tokens found in the prefix cache."]
            prefix_hit_tokens_total,
            #[doc = "Sequences preempted (to recompute later) when KV blocks ran out."]
            preemptions_total,
            #[doc = "Forward steps that failed (an error or a panic in the model step); their sequences were failed or run again one at a time."]
            step_failures_total,
            #[doc = "Tokens sampled under a grammar mask."]
            grammar_masks_total,
            #[doc = "Microseconds helper threads spent computing grammar masks (overlapping forward passes)."]
            grammar_mask_compute_us_total,
            #[doc = "Microseconds sampling waited for a grammar mask still being computed."]
            grammar_mask_wait_us_total,
            #[doc = "Images encoded by the vision projector (all their tiles and thumbnail)."]
            images_encoded_total,
            #[doc = "Encoder inputs (tiles and thumbnails, or single images) encoded."]
            image_tiles_encoded_total,
            #[doc = "Microseconds spent preprocessing and encoding images."]
            image_encode_us_total,
            #[doc = "Images whose embeddings came from the image cache (same content seen before)."]
            image_cache_hits_total,
            #[doc = "Decode steps that verified speculative drafts (vLLM's spec_decode_num_drafts)."]
            spec_drafts_total,
            #[doc = "Tokens drafted for speculative decoding (spec_decode_num_draft_tokens)."]
            spec_draft_tokens_total,
            #[doc = "Drafted tokens the model's own sampling agreed with (spec_decode_num_accepted_tokens)."]
            spec_accepted_tokens_total,
        }
    };
}

macro_rules! declare_metrics {
    ($( $(#[doc = $doc:literal])* $name:ident, )*) => {
        /// The live values, shared by the scheduler (which updates them) and the engine handle.
        #[derive(Debug, Default)]
        pub struct Metrics {
            $( $(#[doc = $doc])* pub $name: AtomicUsize, )*
        }

        /// One reading of every metric.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct MetricsSnapshot {
            $( $(#[doc = $doc])* pub $name: usize, )*
        }

        impl Metrics {
            pub fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }
    };
}

crate::with_metrics!(declare_metrics);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_every_counter() {
        let m = Metrics::default();
        m.running.store(2, Ordering::Relaxed);
        m.preemptions_total.fetch_add(3, Ordering::Relaxed);
        let s = m.snapshot();
        assert_eq!((s.running, s.preemptions_total, s.waiting), (2, 3, 0));
    }
}
