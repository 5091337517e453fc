//! Ordered result assembly: results arrive in completion order and leave in model order.

use crate::error::EngineError;

/// Given the slot of each result in completion order, returns for every slot
/// (model order) the position of its result in the completion list.
///
/// Fails unless every slot in `0..slots` is answered exactly once.
pub fn model_order(slots: usize, completed: &[usize]) -> Result<Vec<usize>, EngineError> {
    const UNSET: usize = usize::MAX;
    let mut positions = vec![UNSET; slots];
    for (position, &slot) in completed.iter().enumerate() {
        let Some(entry) = positions.get_mut(slot) else {
            return Err(EngineError::Assembly(format!(
                "result for slot {slot}, but the turn has {slots} calls"
            )));
        };
        if *entry != UNSET {
            return Err(EngineError::Assembly(format!("two results for slot {slot}")));
        }
        *entry = position;
    }
    if let Some(missing) = positions.iter().position(|&p| p == UNSET) {
        return Err(EngineError::Assembly(format!("no result for slot {missing}")));
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_order_becomes_model_order() {
        assert_eq!(model_order(3, &[2, 0, 1]).unwrap(), vec![1, 2, 0]);
        assert_eq!(model_order(0, &[]).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn every_slot_is_answered_exactly_once() {
        assert!(model_order(2, &[0])
            .unwrap_err()
            .to_string()
            .contains("no result for slot 1"));
        assert!(model_order(2, &[0, 0]).unwrap_err().to_string().contains("two results"));
        assert!(model_order(1, &[3]).is_err());
    }
}
