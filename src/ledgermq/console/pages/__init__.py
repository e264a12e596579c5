"""The console's pages, one module each with its ``routes``; ``console.app`` adds them."""
