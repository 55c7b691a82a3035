//! The tensors of a model file (or of a set of shards), in file order, looked up by name.

use super::error::ModelError;
use super::tensor::Tensor;
use std::collections::HashMap;
use std::path::Path;

#[derive(Clone, Debug, Default)]
pub struct TensorSet {
    tensors: Vec<Tensor>,
    index: HashMap<String, usize>,
}

impl TensorSet {
    pub fn new() -> TensorSet {
        TensorSet::default()
    }

    /// Adds a tensor; a second tensor of the same name is an error (`file` names the culprit).
    pub fn insert(&mut self, tensor: Tensor, file: &Path) -> Result<(), ModelError> {
        if self.index.contains_key(&tensor.name) {
            return Err(ModelError::DuplicateTensor { file: file.to_path_buf(), tensor: tensor.name });
        }
        self.index.insert(tensor.name.clone(), self.tensors.len());
        self.tensors.push(tensor);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.iter()
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}
