//! Packed weights through the load's pack cache (`runtime::weight_cache`, held by the
//! `Placement`): each loader asks for a weight by its GGUF name (several names joined by `+`
//! for weights concatenated into one, `#e` for expert e of a stacked tensor) before packing it,
//! and saves what it packed under that name.

use crate::error::Result;
use crate::kernels::PackedWeight;
use crate::runtime::device::Placement;

/// The packed weight saved as `name` in the load's pack cache, else `pack`'s (then saved
/// there for the next load).
pub(super) fn cached_pack(
    dev: &Placement,
    name: &str,
    pack: impl FnOnce() -> Result<Option<PackedWeight>>,
) -> Result<Option<PackedWeight>> {
    if let Some(w) = cached(dev, name) {
        return Ok(Some(w));
    }
    let w = pack()?;
    if let Some(w) = &w {
        save_packed(dev, &[], name, w);
    }
    Ok(w)
}

/// The packed weight saved as `name` in the load's pack cache, when it has a whole one.
pub(super) fn cached(dev: &Placement, name: &str) -> Option<PackedWeight> {
    let (meta, panels) = dev.packs()?.get(name)?;
    PackedWeight::from_cache_entry(&meta, panels)
}

/// Saves `w` as `name` in the load's pack cache, in place of the weights named `parts`
/// (folded into it).
pub(super) fn save_packed(dev: &Placement, parts: &[&str], name: &str, w: &PackedWeight) {
    if let (Some(cache), Some((meta, panels))) = (dev.packs(), w.cache_entry()) {
        cache.put(parts, name, meta, panels);
    }
}
