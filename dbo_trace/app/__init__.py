"""The application layer: how the user's files become a Report (the pipeline, and its steps run as
Ray tasks), and the review archive that packs a report's renderings. Above the analysis and the
renderers, below the commands."""
