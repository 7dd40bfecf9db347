//! Packed weights through the load's pack cache (`runtime::weight_cache`, held by the
//! `Placement`): each loader asks for a weight by its GGUF name (several names joined by `+`
//! for weights concatenated into one, `#e` for expert e of a stacked tensor) before packing it,
//! and saves what it packed under that name.

use crate::error::Result;
use crate::gguf::GgufFile;
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
    if let (Some(cache), Some((meta, panels))) = (dev.packs(), w.as_ref().and_then(PackedWeight::cache_entry))
    {
        cache.put(name, meta, panels);
    }
    Ok(w)
}

/// The packed weight saved as `name` in the load's pack cache, when it has a whole one.
pub(super) fn cached(dev: &Placement, name: &str) -> Option<PackedWeight> {
    let (meta, panels) = dev.packs()?.get(name)?;
    PackedWeight::from_cache_entry(&meta, panels)
}

/// GGUF weights `names` (dims `{n_in, width}` each) as one packed weight, their panels end to
/// end: from the load's pack cache (saved under the names joined by `+`), else packed straight
/// from the file (then saved). None off the exact path, or when they are not all of one packed
/// type (the caller loads them apart).
pub(super) fn packed_parts(
    g: &GgufFile,
    names: &[String],
    widths: &[usize],
    n_in: usize,
    dev: &Placement,
) -> Result<Option<PackedWeight>> {
    let dtypes: Vec<_> = names.iter().filter_map(|n| g.info(n).map(|t| t.dtype)).collect();
    if !dev.exact() || dtypes.len() != names.len() || dtypes.iter().any(|&d| d != dtypes[0]) {
        return Ok(None);
    }
    for (name, &w) in names.iter().zip(widths) {
        g.expect_dims(name, &[n_in, w])?;
    }
    cached_pack(dev, &names.join("+"), || {
        let parts =
            names.iter().zip(widths).map(|(n, &w)| Ok((g.bytes(n)?, w))).collect::<Result<Vec<_>>>()?;
        PackedWeight::pack_raw_parts(&parts, dtypes[0], n_in)
    })
}
