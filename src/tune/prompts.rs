//! The fixed prompt set `tune` drafts over, compiled in so that every machine measures the same
//! thing: chat, code, and editing ("rewrite this code block with one change", where the answer
//! repeats the prompt and n-gram drafts shine). Each is one user message through the model's
//! chat template.

/// A prompt class and its prompts.
pub struct Class {
    pub name: &'static str,
    pub prompts: &'static [&'static str],
}

/// The code block the editing prompts ask to rewrite (about 300 tokens): a file, so that
/// `concat!` can join it to each instruction.
pub const EDIT_BLOCK: &str = include_str!("edit_block.md");

pub const CLASSES: &[Class] = &[
    Class {
        name: "chat",
        prompts: &[
            "What are three good habits for staying healthy? Answer in a short paragraph.",
            "Explain what a hash map is to a beginner.",
        ],
    },
    Class {
        name: "code",
        prompts: &[
            "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
            "Write a Rust function that reverses the words of a sentence.",
        ],
    },
    Class {
        name: "editing",
        prompts: &[
            concat!(
                "Rewrite this Python code with the method remove renamed to take everywhere. ",
                "Reply with the whole code only.\n\n",
                include_str!("edit_block.md")
            ),
            concat!(
                "Rewrite this Python code with the class Inventory renamed to Stock everywhere. ",
                "Reply with the whole code only.\n\n",
                include_str!("edit_block.md")
            ),
        ],
    },
];
